#include "harness.h"
int main(int c,char**v){th_init(c,v,10);return th_done();}
