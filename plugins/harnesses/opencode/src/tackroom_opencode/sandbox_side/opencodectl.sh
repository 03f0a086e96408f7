#!/bin/bash
# opencodectl: start, watch and stop one headless OpenCode run inside a sandbox.
# Uploaded by the tackroom `opencode` harness to <root>/opencodectl.sh; needs only bash and coreutils.
#
#   opencodectl.sh start ROOT ARGV...  run ARGV in its own session with ROOT/run/instruction.md on stdin
#                                      (OpenCode reads the message verbatim from there),
#                                      events to ROOT/run/events.jsonl, stderr to ROOT/run/stderr.log,
#                                      exit status to ROOT/run/exit_code
#   opencodectl.sh poll ROOT           print "ALIVE EXIT EVENT_BYTES STDERR_BYTES LOG_BYTES"
#   opencodectl.sh stop ROOT TOKEN GRACE
#                                      TERM, then after GRACE seconds KILL, every process whose
#                                      environment holds TACKROOM_OPENCODE_RUN=TOKEN (OpenCode and
#                                      every command it started, also those that left its session)
set -u
cmd=$1
root=$2
shift 2
run=$root/run

size() { stat -c %s "$1" 2>/dev/null || echo 0; }

marked() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    if tr '\000' '\n' < "$d/environ" 2>/dev/null | grep -qx "TACKROOM_OPENCODE_RUN=$1"; then echo "$p"; fi
  done
}

case $cmd in
start)
  mkdir -p "$run"
  rm -f "$run/exit_code" "$run/pid"
  setsid bash -c '
    run=$1; shift
    echo $$ > "$run/pid"
    "$@" < "$run/instruction.md" > "$run/events.jsonl" 2> "$run/stderr.log"
    echo $? > "$run/exit_code"
  ' opencodectl "$run" "$@" > /dev/null 2>&1 < /dev/null &
  for _ in $(seq 200); do
    [ -s "$run/pid" ] && exit 0
    sleep 0.05
  done
  echo "opencode did not start within 10s" >&2
  exit 1
  ;;
poll)
  pid=$(cat "$run/pid" 2>/dev/null)
  alive=0
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    state=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)
    [ "$state" != "Z" ] && alive=1
  fi
  code=$(cat "$run/exit_code" 2>/dev/null)
  logs=$(cat "$root"/xdg/data/opencode/log/*.log 2>/dev/null | wc -c)
  echo "$alive ${code:--} $(size "$run/events.jsonl") $(size "$run/stderr.log") $logs"
  ;;
stop)
  token=$1
  grace=$2
  pids=$(marked "$token")
  [ -z "$pids" ] && exit 0
  kill -TERM $pids 2>/dev/null
  for _ in $(seq $((grace * 10))); do
    pids=$(marked "$token")
    [ -z "$pids" ] && exit 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null
  sleep 0.2
  [ -z "$(marked "$token")" ]
  ;;
*)
  echo "usage: opencodectl.sh start|poll|stop ROOT ..." >&2
  exit 2
  ;;
esac
