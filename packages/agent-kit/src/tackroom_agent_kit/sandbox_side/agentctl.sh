#!/bin/bash
# agentctl: start, watch and stop one headless agent run inside a sandbox.
# Uploaded by tackroom's agent harnesses (tackroom_agent_kit.AgentControl) to <root>/agentctl.sh; needs only bash
# and coreutils.
#
#   agentctl.sh start ROOT ARGV...  run ARGV in its own session with ROOT/run/stdin on stdin,
#                                   stdout to ROOT/run/stdout.log, stderr to ROOT/run/stderr.log,
#                                   exit status to ROOT/run/exit_code
#   agentctl.sh poll ROOT [GLOB]    print "ALIVE EXIT STDOUT_BYTES STDERR_BYTES LOG_BYTES" (LOG_BYTES: the agent's
#                                   own log files matching GLOB under ROOT, 0 without one)
#   agentctl.sh stop ROOT TOKEN GRACE
#                                   TERM, then after GRACE seconds KILL, every process whose
#                                   environment holds TACKROOM_AGENT_RUN=TOKEN (the agent and
#                                   every command it started, also those that left its session)
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
    if tr '\000' '\n' < "$d/environ" 2>/dev/null | grep -qx "TACKROOM_AGENT_RUN=$1"; then echo "$p"; fi
  done
}

case $cmd in
start)
  mkdir -p "$run"
  rm -f "$run/exit_code" "$run/pid"
  setsid bash -c '
    run=$1; shift
    echo $$ > "$run/pid"
    "$@" < "$run/stdin" > "$run/stdout.log" 2> "$run/stderr.log"
    echo $? > "$run/exit_code"
  ' agentctl "$run" "$@" > /dev/null 2>&1 < /dev/null &
  for _ in $(seq 200); do
    [ -s "$run/pid" ] && exit 0
    sleep 0.05
  done
  echo "the agent did not start within 10s" >&2
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
  logs=0
  if [ -n "${1:-}" ]; then logs=$(cat "$root"/$1 2>/dev/null | wc -c); fi
  echo "$alive ${code:--} $(size "$run/stdout.log") $(size "$run/stderr.log") $logs"
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
  echo "usage: agentctl.sh start|poll|stop ROOT ..." >&2
  exit 2
  ;;
esac
