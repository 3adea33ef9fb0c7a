# bash completion for rlock -- installed as
# share/bash-completion/completions/rlock. tests/cli/docs.sh checks that it
# offers every command and every long option of `rlock COMMAND --help`.
_rlock() {
  local cur prev cmd i
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  local global="-u --url --tls-ca --tls-cert --tls-key --tls-server-name --insecure --replica-sync --replica-sync-timeout -h --help --version"
  # the command: the first word that is not an option or an option's value
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      -u | --url | --tls-ca | --tls-cert | --tls-key | --tls-server-name | --replica-sync | --replica-sync-timeout) ((i++)) ;;
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $prev in
    --tls-ca | --tls-cert | --tls-key) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --replica-sync) COMPREPLY=($(compgen -W "off one majority all" -- "$cur")); return ;;
    -u | --url) COMPREPLY=($(compgen -W "redis:// rediss:// unix:// redis+sentinel:// redis+cluster://" -- "$cur")); return ;;
    --wait | --lease | --watchdog | --kill-after | --replica-sync-timeout | --workers | --stock | --permits | -E | --conflict-exit-code | --tls-server-name) return ;;
  esac
  local opts
  case $cmd in
    "") COMPREPLY=($(compgen -W "exec status unlock demo semaphore latch acquire extend release ls wait help $global" -- "$cur")); return ;;
    exec) opts="--wait --lease --watchdog --kill-after -E --conflict-exit-code --permit --permits --simple --fair --nonreentrant --fenced --spin --read --write --redlock" ;;
    status) opts="--json --simple --fair --fenced --read --write --redlock" ;;
    unlock) opts="--force --any-type --simple --fair --read --write" ;;
    demo) opts="--workers --stock" ;;
    semaphore | latch)
      opts="--json --wait"
      if [[ $cur != -* ]]; then
        [[ $cmd == semaphore ]] && COMPREPLY=($(compgen -W "set acquire release status" -- "$cur"))
        [[ $cmd == latch ]] && COMPREPLY=($(compgen -W "set down await status" -- "$cur"))
        return
      fi ;;
    acquire) opts="--lease --wait" ;;
    extend) opts="--lease" ;;
    release) opts="" ;;
    ls) opts="--json" ;;
    wait) opts="--wait --json" ;;
    help) COMPREPLY=($(compgen -W "exec status unlock demo semaphore latch acquire extend release ls wait" -- "$cur")); return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts $global" -- "$cur"))
  elif [[ $cmd == exec && " ${COMP_WORDS[*]} " == *" -- "* ]]; then
    COMPREPLY=($(compgen -c -- "$cur")) # the command to run
  fi
}
complete -F _rlock rlock
