"""The scripts that end the agent's processes (run with the toolset's sh, from the host, see :mod:`tackroom_docker.toolset`)."""

from __future__ import annotations

# Prints "inode description" for each listening socket of the network namespace it runs in: TCP in LISTEN,
# bound UDP sockets that are not connected, unix stream/seqpacket sockets that listen; then, from `ls -l` of
# every process's fd folder on stdin, "pid description" for each process that holds one.
LISTENERS_AWK = r"""
function hex(h,   i, n) { n = 0; h = toupper(h); for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789ABCDEF", substr(h, i, 1)) - 1; return n }
function addr(h,   a, ip) {
    split(h, a, ":")
    if (length(a[1]) == 8) ip = hex(substr(a[1], 7, 2)) "." hex(substr(a[1], 5, 2)) "." hex(substr(a[1], 3, 2)) "." hex(substr(a[1], 1, 2))
    else ip = "[" a[1] "]"
    return ip ":" hex(a[2])
}
FILENAME ~ /\/(tcp|tcp6)$/ && FNR > 1 && $4 == "0A" { sock[$10] = (FILENAME ~ /6$/ ? "tcp6 " : "tcp ") addr($2); next }
FILENAME ~ /\/(udp|udp6)$/ && FNR > 1 && $4 == "07" { split($2, a, ":"); if (a[2] != "0000") sock[$10] = (FILENAME ~ /6$/ ? "udp6 " : "udp ") addr($2); next }
FILENAME ~ /\/unix$/ && FNR > 1 && $4 == "00010000" && ($5 == "0001" || $5 == "0005") { sock[$7] = "unix " ($8 == "" ? "(unnamed)" : $8); next }
FILENAME == "-" && /^\/proc\/[0-9]+\/fd\/?:$/ { pid = $0; sub(/^\/proc\//, "", pid); sub(/\/fd\/?:$/, "", pid); next }
FILENAME == "-" && /socket:\[/ { i = $0; sub(/.*socket:\[/, "", i); sub(/\].*/, "", i); if ((i in sock) && !(pid in kept)) { kept[pid] = sock[i] } }
END { for (p in kept) print p, kept[p] }
"""

# kill_processes(): args: "init" when PID 1 is docker-init (the keeper is then its oldest child), or "keeper";
# the seconds to keep confirming; "1" to keep (frozen) every process that holds a listening socket; how many
# hundredths of a second busy processes get, at most, to settle first (a server still starting opens its socket:
# until no process that holds no listening socket and was there 0.1 s ago used CPU since or is in the kernel (D)).
# Runs from the host in the container's pid, mount and network namespaces, outside its cgroup: an exhausted
# pids limit cannot stop it. kill(-1) signals every process but PID 1 and the caller at once, also those in the
# middle of a fork. Prints "kept PID COMM: SOCKET" for each process it keeps.
KILL_ALL = r"""
mode=$1; wait_cs=$(($2 * 100)); keep_listening=$3; settle_cs=${4:-0}; me=$$; keeper=; kept=" "
now() {  # hundredths of a second since boot, without leading zeros (sh arithmetic reads those as octal)
    read -r u _ < /proc/uptime; now_cs=${u%.*}${u#*.}
    while [ "${#now_cs}" -gt 1 ] && [ "${now_cs#0}" != "$now_cs" ]; do now_cs=${now_cs#0}; done
}
if [ "$keep_listening" = 1 ] && [ "$settle_cs" -gt 0 ]; then
    now; settle_start=$now_cs; last=
    while :; do
        lis=" $(ls -l /proc/[0-9]*/fd/ 2>/dev/null | awk '%AWK%' /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 /proc/net/unix - 2>/dev/null | while read -r p _; do printf '%s ' "$p"; done)"
        cur=" "; busy=
        for d in /proc/[0-9]*; do
            p=${d#/proc/}
            case $p in 1|"$me") continue ;; esac
            { read -r line < "$d/stat"; } 2>/dev/null || continue
            set -- ${line##*) }
            case $1 in Z|X|x) continue ;; esac
            [ "$2" = "$me" ] && continue
            t=$(( ${12} + ${13} )); cur="$cur$p:$t "
            case $lis in *" $p "*) continue ;; esac
            case $last in *" $p:$t "*) [ "$1" = D ] && busy="$busy $p" ;; *" $p:"*) busy="$busy $p" ;; esac
        done
        [ -n "$last" ] && [ -z "$busy" ] && break  # (the first pass only takes the measure)
        now; [ $((now_cs - settle_start)) -ge "$settle_cs" ] && break
        last=$cur
        sleep 0.1
    done
    now; echo "settled $((now_cs - settle_start))$busy"
fi
if [ "$mode" = init ] || [ "$keep_listening" = 1 ]; then kill -STOP -1 2>/dev/null; fi
if [ "$mode" = init ]; then
    best=
    for d in /proc/[0-9]*; do
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        set -- ${line##*) }
        [ "$2" = 1 ] || continue
        if [ -z "$best" ] || [ "${20}" -lt "$beststart" ]; then best=${d#/proc/}; beststart=${20}; fi
    done
    keeper=$best
fi
if [ "$keep_listening" = 1 ]; then
    listing=$(ls -l /proc/[0-9]*/fd/ 2>/dev/null | awk '%AWK%' /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 /proc/net/unix - 2>/dev/null)
    nl='
'
    oldifs=$IFS; IFS=$nl
    for line in $listing; do
        IFS=$oldifs
        p=${line%% *}; desc=${line#* }
        case $p in 1|"$me"|"$keeper") IFS=$nl; continue ;; esac
        kept="$kept$p "
        { read -r comm < "/proc/$p/comm"; } 2>/dev/null || comm=?
        echo "kept $p $comm: $desc"
        IFS=$nl
    done
    IFS=$oldifs
fi
before=" "
for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case $p in 1|"$me"|"$keeper") continue ;; esac
    case $kept in *" $p "*) continue ;; esac
    before="$before$p "
done
if [ -n "$keeper" ] || [ "$keep_listening" = 1 ]; then
    for p in $before; do
        if [ "$keep_listening" = 1 ] && { read -r comm < "/proc/$p/comm"; read -r line < "/proc/$p/stat"; } 2>/dev/null; then
            set -- ${line##*) }  # the keeper's own sleep is no process of the agent's
            [ "$2" = "${keeper:-1}" ] && [ "$comm" = sleep ] || echo "killed $p $comm"
        fi
        kill -9 "$p" 2>/dev/null
    done
    [ -n "$keeper" ] && kill -CONT "$keeper" 2>/dev/null
else
    kill -9 -1 2>/dev/null
fi
now; deadline=$((now_cs + wait_cs))
while :; do
    left=
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        case $p in 1|"$me"|"$keeper") continue ;; esac
        case $kept in *" $p "*) continue ;; esac
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        comm=${line#*(}; comm=${comm%)*}
        set -- ${line##*) }
        case $1 in Z|X|x) continue ;; esac
        if [ "$2" = "${keeper:-1}" ] && [ "$comm" = sleep ]; then
            case $before in *" $p "*) ;; *) continue ;; esac
        fi
        left="$left $p"
    done
    [ -z "$left" ] && exit 0
    now; if [ "$now_cs" -ge "$deadline" ]; then echo "still alive after SIGKILL:$left"; exit 1; fi
    for p in $left; do kill -9 "$p" 2>/dev/null; done
    sleep 0.01
done
""".replace("%AWK%", LISTENERS_AWK)

# Kills every process of one exec: they all inherit its marker variable, also across setsid/daemonising.
KILL_MARKED = (
    'for pass in 1 2; do for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; '
    'if tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qx "$1"; then kill -9 "$p" 2>/dev/null; fi; done; done'
)

# Freezes every process of the container but PID 1 (kept services between grader commands).
FREEZE_ALL = "kill -STOP -1 2>/dev/null; exit 0"
