# Build-time embedding of a Lua script: turns IN (a .lua file) into OUT, a C
# file defining `const char NAME[]` (the script text, NUL-terminated).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} at build time; do not edit */\nconst char ${NAME}[] = {${bytes} 0x00};\n")
