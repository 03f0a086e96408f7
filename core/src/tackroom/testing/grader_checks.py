"""Sandbox checks for what keeps the grader's own run out of the agent's reach, part of the sandbox kit.

Each plays an agent that goes for grading rather than for its task (docs/threat-model.md, "Grading"):

- ``added_tools_survive``: a tool the agent installed (in ``/usr/bin``, and through ``/bin`` where ``/bin`` is
  ``usr/bin``, as on merged-``/usr`` images) is still there after :meth:`Sandbox.restore_image_tools`.
- ``shadowed_shell``: ``sh``, ``bash``, ``kill``, ``rm`` and friends planted earlier on ``PATH`` (doing
  nothing) leave the sandbox's own helpers working: :meth:`Sandbox.kill_processes` still kills, the restore
  still removes the shadows.
- ``startup_hooks``: a ``.pth`` file, ``sitecustomize`` / ``usercustomize``, perl's ``sitecustomize.pl`` and a
  ``strict.pm`` planted earlier on ``@INC`` than the image's run nothing inside :meth:`Sandbox.run_grader`; nor
  does ``PERL5LIB``, ``PERL5OPT`` or ``PYTHONPATH`` from the sandbox's own environment.
- ``reward_prefill``: a reward the agent wrote into ``/logs/verifier`` and a folder it locked are never
  read: the grader's copy holds only what its command wrote (or grading is the model's 0).
- ``kept_services``: ``kill_processes(keep_listening=True)`` keeps a listening process, frozen; it answers
  the grader's command inside :meth:`Sandbox.run_grader` but cannot see or write its private folders, and
  is frozen again after.
- ``kept_service_write``: a kept service that, once the grader's command runs, rewrites the answer it reads in
  the working directory (through its own cwd) changes nothing the command reads: with services kept,
  ``run_grader(graded=...)`` reads a copy taken while they were frozen; the service's write lands in the
  sandbox's own folder (the check reads it there, so a service that never ran fails the check too).
- ``set_network``: switching a started sandbox's network to ``public`` and back to ``none`` does what it
  says (interfaces besides loopback come and go), and ``allowlist`` works or is refused by name.

- ``added_test_tooling``: a fake ``pytest`` distribution and a ``pytest11`` plugin the agent left in a virtualenv
  folder (where ``test.sh`` is about to create one) are gone after :meth:`Sandbox.restore_image_tools`; a package
  that is not test tooling stays.

- ``install_config`` (:mod:`tackroom.testing.install_checks`): pip, uv, apt, npm and pytest configuration the
  agent planted where those tools discover it is not what they see inside :meth:`Sandbox.run_grader`.

A check that needs what a sandbox does not offer (no ``keep_listening``, no network switch, no perl or
python in the image) is skipped with the reason, never passed.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
from pathlib import Path

from tackroom._grading import prepare_grading
from tackroom._sandbox import (
    GradingSabotagedError,
    NetworkPolicy,
    NetworkSwitch,
    Sandbox,
    SandboxError,
    ServiceKeeper,
    ToolRestorer,
)
from tackroom.testing._context import CheckContext
from tackroom.testing._report import SkipCheck
from tackroom.testing.install_checks import check_install_config

REWARD_DIR = "/logs/verifier"
SHADOWED = ("sh", "bash", "dash", "kill", "rm", "mkdir", "ls", "find", "tar", "cat", "cp", "mv", "chmod", "stat",
            "sleep", "ps", "pkill", "env", "busybox", "nsenter", "readlink", "sort")


async def _restore(sb: Sandbox) -> list[str]:
    if not isinstance(sb, ToolRestorer):
        raise SkipCheck("the sandbox cannot restore the image's tools (it is no ToolRestorer)")
    restored = await sb.restore_image_tools()
    if restored is None:
        raise SkipCheck("the sandbox cannot restore the image's tools (restore_image_tools returned None)")
    return restored


async def check_added_tools_survive(sb: Sandbox, ctx: CheckContext) -> None:
    """Tools the agent installed stay through ``restore_image_tools``, also on merged-/usr images."""
    token = secrets.token_hex(4)
    tools = [f"/usr/bin/tackroom-added-{token}", f"/bin/tackroom-added-bin-{token}", f"/usr/local/bin/tackroom-added-{token}"]
    made = await sb.exec(" ; ".join(f"mkdir -p {shlex.quote(str(Path(t).parent))} && printf '#!/bin/sh\\necho ok\\n' > {t} "
                                    f"&& chmod 755 {t} && echo {t}" for t in tools), timeout=30)
    placed = made.stdout.split()
    if not placed:
        raise SkipCheck("the agent can install nothing in /usr/bin, /bin or /usr/local/bin here")
    merged = (await sb.exec("[ -L /bin ] && echo merged", timeout=30)).stdout.strip() == "merged"
    await _restore(sb)
    gone = [t for t in placed if (await sb.exec([t], timeout=30)).stdout != "ok\n"]
    await sb.exec(["rm", "-f", *placed], timeout=30)
    assert not gone, (f"restore_image_tools removed tools the agent installed: {gone}"
                      + (" (a merged-/usr image: compare real paths, /bin is usr/bin)" if merged else ""))


async def check_added_test_tooling(sb: Sandbox, ctx: CheckContext) -> None:
    """Test tooling the agent installed is uninstalled by ``restore_image_tools``; other packages stay."""
    site = f"/tmp/grader-venv-{secrets.token_hex(3)}/lib/python3.13/site-packages"
    script = "".join(
        f"mkdir -p {site}/{pkg} {site}/{info} && : > {site}/{pkg}/__init__.py && printf '%s' {shlex.quote(ep)} > "
        f"{site}/{info}/entry_points.txt && printf '%s,,\n' {pkg}/__init__.py {info}/RECORD > {site}/{info}/RECORD\n"
        for pkg, info, ep in (("pytest", "pytest-8.4.1.dist-info", "[console_scripts]\npytest = pytest:main\n"),
                              ("passall", "passall-1.0.dist-info", "[pytest11]\npassall = passall\n"),
                              ("numpy", "numpy-2.3.0.dist-info", "")))
    made = await sb.exec(script, timeout=30)
    if not made.ok:
        raise SkipCheck(f"could not plant packages in /tmp: {made.stderr[-200:]}")
    await _restore(sb)
    left = (await sb.exec(f"cd {site} && ls -d pytest* passall* numpy* 2>/dev/null", timeout=30)).stdout.split()
    await sb.exec(["rm", "-rf", site.split("/lib/")[0]], timeout=30)
    assert "numpy-2.3.0.dist-info" in left and "numpy" in left, f"a package that is not test tooling was removed: {left}"
    assert not [n for n in left if not n.startswith("numpy")], f"the agent's test tooling stayed for the grader: {left}"


async def check_shadowed_shell(sb: Sandbox, ctx: CheckContext) -> None:
    """Do-nothing ``sh``/``bash``/``kill``/``rm``... earlier on PATH: kill_processes still kills and the restore
    removes them."""
    found = await sb.exec('command -v bash; IFS=:; for d in $PATH; do [ -d "$d" ] && [ -w "$d" ] && echo "$d"; done',
                          timeout=30)
    lines = found.stdout.split()
    if len(lines) < 2:
        raise SkipCheck("no PATH folder is writable here: the agent cannot shadow the shell")
    bash, first = lines[0], lines[1]
    # Only a name the image also has later on PATH is a shadow; the others are tools the agent added, which stay.
    later = await sb.exec([bash, "-c", f'IFS=:; seen=; for d in $PATH; do if [ "$d" = {shlex.quote(first)} ]; then seen=1; '
                           f'continue; fi; [ -n "$seen" ] || continue; for n in {" ".join(SHADOWED)}; do '
                           '[ -x "$d/$n" ] && [ ! -e "' + first + '/$n" ] && echo "$n"; done; done; true'], timeout=30)
    shadows = set(later.stdout.split())
    log = f"{ctx.root}/shadow.log"
    fake = "#!/bin/sh\nexit 0\n"
    plant = " ; ".join(f"printf %s {shlex.quote(fake)} > {first}/{name} && chmod 755 {first}/{name}" for name in SHADOWED)
    # The writer sleeps with a builtin (read -t on an idle pipe): `sleep` is among the shadows.
    started = await sb.exec([bash, "-c", f"mkdir -p {ctx.root}; ({bash} -c 'exec 9<> <(:); while :; do echo x >> {log}; "
                             f"read -t 0.05 -u 9; done' >/dev/null 2>&1 &) ; {plant}; exit 0"], timeout=30)
    assert started.ok, f"could not plant the shadows: {started.stderr[-300:]!r}"
    try:
        await asyncio.sleep(0.3)
        await sb.kill_processes(timeout=30)
        first_size = (await sb.exec([bash, "-c", f"read -r -d '' x < {log}; echo ${{#x}}"], timeout=30)).stdout
        await asyncio.sleep(0.4)
        second_size = (await sb.exec([bash, "-c", f"read -r -d '' x < {log}; echo ${{#x}}"], timeout=30)).stdout
        assert first_size == second_size, (f"with sh, bash and kill shadowed on PATH ({first}), kill_processes() left the "
                                           "agent's writer running")
        restored = await _restore(sb)
        left = (await sb.exec([bash, "-c", f"for n in {' '.join(SHADOWED)}; do [ -e {first}/$n ] && echo $n; done; true"],
                              timeout=30)).stdout.split()
        left = sorted(set(left) & shadows)
        assert not left, f"restore_image_tools left the agent's shadows in {first}: {left} (restored: {restored[:10]})"
    finally:
        await sb.exec([bash, "-c", f"for n in {' '.join(SHADOWED)}; do if [ -e {first}/$n ] && "
                       f"[ \"$(head -c 9 {first}/$n)\" = '#!/bin/sh' ]; then unlink {first}/$n; fi; done; true"], timeout=30)
        await sb.kill_processes(timeout=30)  # the writer, where the shadowed kill left it running


PTH = "import sys; sys.stdout.write('HOOKED-pth\\n')\n"
SITECUSTOMIZE = "import sys\nsys.stdout.write('HOOKED-sitecustomize\\n')\n"
USERCUSTOMIZE = "import sys\nsys.stdout.write('HOOKED-usercustomize\\n')\n"
PERL_HOOK = 'print STDOUT "HOOKED-perl\\n";\n1;\n'
PERL_SHADOW = 'package strict; print STDOUT "HOOKED-perl-strict\\n"; sub import {} sub unimport {} 1;\n'
PLANT_HOOKS = r"""
root=$1
if command -v python3 >/dev/null; then
    for d in $(python3 -c 'import site, sys; print("\n".join([*site.getsitepackages(), site.getusersitepackages()]))'); do
        mkdir -p "$d" 2>/dev/null
        printf '%s' "$PTH" > "$d/tackroom-hook.pth" 2>/dev/null && echo "python-pth $d"
        printf '%s' "$SITECUSTOMIZE" > "$d/sitecustomize.py" 2>/dev/null && echo "python-sitecustomize $d"
        printf '%s' "$USERCUSTOMIZE" > "$d/usercustomize.py" 2>/dev/null && echo "python-usercustomize $d"
    done
    mkdir -p "$root/pylib" && printf '%s' "$SITECUSTOMIZE" > "$root/pylib/sitecustomize.py"
fi
if command -v perl >/dev/null; then
    for d in /etc/perl $(perl -e 'print join("\n", @INC)'); do
        mkdir -p "$d" 2>/dev/null || continue
        printf '%s' "$PERL_HOOK" > "$d/sitecustomize.pl" 2>/dev/null && echo "perl-sitecustomize $d"
        # a module of the image's, shadowed by a copy earlier on @INC (Debian's /etc/perl comes first)
        printf '%s' "$PERL_SHADOW" > "$d/strict.pm" 2>/dev/null && echo "perl-strict $d"
    done
    mkdir -p "$root/perllib" && printf '%s' "$PERL_HOOK" > "$root/perllib/TackroomHook.pm"
fi
true
"""


async def check_startup_hooks(sb: Sandbox, ctx: CheckContext) -> None:
    """``.pth``, sitecustomize/usercustomize and perl's sitecustomize.pl the agent planted, and PYTHONPATH, PERL5LIB and
    PERL5OPT in the sandbox's environment (as a Dockerfile's ENV would set them), run nothing in the grader's command."""
    if ctx.provider is None:
        raise SkipCheck("no provider in the check context to start a sandbox with hook paths in its environment")
    root = f"/tmp/tackroom-hooks-{secrets.token_hex(4)}"
    spec = ctx.spec.model_copy(update={"name": f"{ctx.spec.name}-hooks", "env": {
        **ctx.spec.env, "PYTHONPATH": f"{root}/pylib", "PERL5LIB": f"{root}/perllib", "PERL5OPT": "-MTackroomHook"}})
    hooks = ctx.provider.create(spec)
    try:
        await hooks.start()
        has = (await hooks.exec("command -v python3; command -v perl; true", timeout=30)).stdout
        if "python3" not in has and "perl" not in has:
            raise SkipCheck("the image has neither python3 nor perl")
        planted = await hooks.exec(["bash", "-c", PLANT_HOOKS, "plant", root], timeout=60, env={
            "PTH": PTH, "SITECUSTOMIZE": SITECUSTOMIZE, "USERCUSTOMIZE": USERCUSTOMIZE, "PERL_HOOK": PERL_HOOK,
            "PERL_SHADOW": PERL_SHADOW})
        await _restore(hooks)
        await hooks.exec(["mkdir", "-p", f"{root}/t", f"{root}/l"], timeout=30)
        probe = ("command -v python3 >/dev/null && python3 -c 'print(\"python ran\")'; "
                 "command -v perl >/dev/null && perl -e 'use strict; print \"perl ran\\n\"'; true")
        result = await hooks.run_grader(["bash", "-c", probe], private=[f"{root}/t", f"{root}/l"], collect=f"{root}/l",
                                        dest=ctx.local / "hooks", timeout=60)
    finally:
        await hooks.stop()
    hooked = sorted({line for line in (result.stdout + result.stderr).splitlines() if "HOOKED" in line})
    assert "ran" in result.stdout, f"the probe did not run in run_grader: {result.stdout[-300:]!r} {result.stderr[-300:]!r}"
    assert not hooked, (f"start-up hooks the agent planted ran inside the grader's command: {hooked} "
                        f"(planted: {planted.stdout.splitlines()[:8]})")


async def check_reward_prefill(sb: Sandbox, ctx: CheckContext) -> None:
    """A reward the agent wrote into /logs/verifier, with the folder and file locked (read-only, or search-only so
    that it cannot even be listed), is never read: the grader's copy holds what its command wrote, or nothing."""
    for mode in ("555", "111"):
        await _prefilled_reward_is_never_read(sb, ctx, mode)


async def _prefilled_reward_is_never_read(sb: Sandbox, ctx: CheckContext, mode: str) -> None:
    lock = (f"mkdir -p {REWARD_DIR} && echo 1 > {REWARD_DIR}/reward.txt && echo '{{\"reward\": 1}}' > {REWARD_DIR}/reward.json"
            f" && chmod 444 {REWARD_DIR}/reward.txt {REWARD_DIR}/reward.json; "
            f"chattr +i {REWARD_DIR}/reward.txt {REWARD_DIR}/reward.json 2>/dev/null; chmod {mode} {REWARD_DIR}; "
            f"chattr +i {REWARD_DIR} 2>/dev/null; true")
    await sb.exec(lock, timeout=30)
    tests = f"{ctx.root}/prefill-tests"
    try:
        try:
            await prepare_grading(sb, [REWARD_DIR, tests], [])
        except GradingSabotagedError:
            return  # the runtime grades this 0 (the model's): the prefilled reward is never read
        for n, (script, want) in enumerate(((f"echo 0 > {REWARD_DIR}/reward.txt", b"0\n"), ("true", None))):
            dest = ctx.local / f"prefill-{mode}-{n}"
            await sb.run_grader(["bash", "-c", script], private=[tests, REWARD_DIR], collect=REWARD_DIR, dest=dest,
                                timeout=60)
            got = (dest / "reward.txt").read_bytes() if (dest / "reward.txt").is_file() else None
            assert got == want, (f"with the folder at mode {mode}, after `{script}` the grader's copy holds reward.txt = "
                                 f"{got!r}, not {want!r}")
            assert not (dest / "reward.json").exists(), "the agent's reward.json reached the grader's copy"
            await prepare_grading(sb, [REWARD_DIR, tests], [])
    finally:
        await sb.exec(f"chattr -i {REWARD_DIR} {REWARD_DIR}/* 2>/dev/null; chmod 755 {REWARD_DIR} 2>/dev/null; "
                      f"rm -rf {REWARD_DIR} 2>/dev/null; true", timeout=30)


SERVICE = r"""
use strict; use IO::Socket::INET;
my ($port, $log, $reward, $tests) = @ARGV;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port, Listen => 5, ReuseAddr => 1) or die "listen: $!";
$s->timeout(0.05);
while (1) {
    open(my $h, ">>", $log); print $h "x"; close($h);
    my $c = $s->accept or next;
    my $wrote = open(my $r, ">", "$reward/reward.txt") ? "wrote" : "blocked"; print $r "1\n" if $wrote eq "wrote"; close($r) if $wrote eq "wrote";
    my $saw = -e "$tests/grader-only.txt" ? "saw" : "blind";
    print $c "alive $wrote $saw\n"; close($c);
    # then, for a while, through every process's root: a grader in a mount namespace of its own is reachable
    # there unless the sandbox keeps the service from seeing (or entering) the grader's processes
    my $until = time + 1;
    while (time < $until) {
        for my $root (glob("/proc/[0-9]*/root")) { if (open(my $w, ">", "$root$reward/reward.txt")) { print $w "1\n"; close($w); } }
        select(undef, undef, undef, 0.01);
    }
}
"""


async def check_kept_services(sb: Sandbox, ctx: CheckContext) -> None:
    """kill_processes(keep_listening=True) keeps a listening process frozen; inside run_grader it answers but cannot see
    or write the grader's private folders; afterwards it is frozen again; a process that listens on nothing is gone."""
    if not (await sb.exec("command -v perl", timeout=30)).ok:
        raise SkipCheck("the image has no perl to run a listening service with")
    d, port = f"{ctx.root}/svc", 20000 + secrets.randbelow(20000)
    tests, rewards, log, other = f"{d}/tests", f"{d}/logs", f"{d}/heartbeat", f"{d}/other"
    await sb.exec(["mkdir", "-p", tests, rewards], timeout=30)
    started = await sb.exec(["bash", "-c", f"(perl -e {shlex.quote(SERVICE)} {port} {log} {rewards} {tests} >/dev/null 2>&1 &); "
                             f"(while :; do echo x >> {other}; sleep 0.05; done >/dev/null 2>&1 &); "
                             f"for i in $(seq 50); do [ -s {log} ] && exit 0; sleep 0.1; done; exit 1"], timeout=30)
    assert started.ok, "the service never started (the check itself is broken)"
    try:
        if not isinstance(sb, ServiceKeeper):
            raise NotImplementedError("it is no ServiceKeeper")
        kept = await sb.kill_processes(timeout=30, keep_listening=True)
    except NotImplementedError as exc:
        await sb.kill_processes(timeout=30)
        raise SkipCheck(f"the sandbox cannot keep listening processes into grading: {exc}") from exc
    except TypeError as exc:
        await sb.kill_processes(timeout=30)
        raise AssertionError(f"kill_processes() does not take keep_listening ({exc}); a sandbox that cannot keep "
                             "services raises NotImplementedError for keep_listening=True") from exc
    assert isinstance(kept, list) and any(str(port) in line for line in kept), (
        f"kill_processes(keep_listening=True) did not report the service on port {port}: {kept}")

    async def size(path: str) -> str:
        return (await sb.exec(["bash", "-c", f"read -r -d '' x < {path}; echo ${{#x}}"], timeout=30)).stdout

    other_a = await size(other)
    log_a = await size(log)
    await asyncio.sleep(0.4)
    assert await size(other) == other_a, "a process listening on nothing was kept running"
    assert await size(log) == log_a, "the kept service ran on after kill_processes(keep_listening=True): it was not frozen"
    grader = (f"echo grader > {tests}/grader-only.txt; exec 3<>/dev/tcp/127.0.0.1/{port} && read -r line <&3; "
              f"echo \"$line\"; echo 0.5 > {rewards}/reward.txt; sleep 0.5")
    try:
        result = await sb.run_grader(["bash", "-c", grader], private=[tests, rewards], collect=rewards,
                                     dest=ctx.local / "svc", timeout=60)
        answer = result.stdout.strip()
        assert answer.startswith("alive"), f"the kept service did not answer the grader: {answer!r} {result.stderr[-300:]!r}"
        assert "blind" in answer, "the kept service saw a file the grader wrote in its private /tests"
        got = (ctx.local / "svc" / "reward.txt").read_text() if (ctx.local / "svc" / "reward.txt").is_file() else None
        assert got == "0.5\n", f"the grader's reward reads {got!r}: the kept service wrote into the grader's folder"
        log_b = await size(log)
        await asyncio.sleep(0.4)
        assert await size(log) == log_b, "the kept service runs on after run_grader: it was not frozen again"
    finally:
        await sb.kill_processes(timeout=30)


WRITER = r"""
use strict; use IO::Socket::INET;
my ($port, $work, $ready, $go) = @ARGV;
chdir $work or die "chdir: $!";
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port, Listen => 5, ReuseAddr => 1) or die "listen: $!";
open(my $r, ">", $ready); close($r);
select(undef, undef, undef, 0.01) until -e $go;
open(my $w, ">", "answer.txt") or die; print $w "steered
"; close($w);
sleep 1000;
"""


async def check_kept_service_write(sb: Sandbox, ctx: CheckContext) -> None:
    """A kept service that rewrites a graded file while the grader's command runs changes nothing the command reads."""
    if not (await sb.exec("command -v perl", timeout=30)).ok:
        raise SkipCheck("the image has no perl to run a listening service with")
    d, port = f"{ctx.root}/write", 20000 + secrets.randbelow(20000)
    work, tests, rewards, ready, go = f"{d}/work", f"{d}/tests", f"{d}/logs", f"{d}/ready", f"{d}/tests/go"
    await sb.exec(["mkdir", "-p", work, tests, rewards], timeout=30)
    started = await sb.exec(["bash", "-c", f"echo honest > {work}/answer.txt; (setsid perl -e {shlex.quote(WRITER)} "
                             f"{port} {work} {ready} {go} >/dev/null 2>&1 < /dev/null &); "
                             f"for i in $(seq 50); do [ -e {ready} ] && exit 0; sleep 0.1; done; exit 1"], timeout=30)
    assert started.ok, "the service never started (the check itself is broken)"
    try:
        try:
            kept = await sb.kill_processes(timeout=30, keep_listening=True)
        except NotImplementedError as exc:
            raise SkipCheck(f"the sandbox cannot keep listening processes into grading: {exc}") from exc
        assert any(str(port) in line for line in kept), f"the service on port {port} was not kept: {kept}"
        await sb.exec(["touch", go], timeout=30)  # the service is frozen: it sees this once the grader's command runs
        grader = (f"sleep 1; echo \"answer=$(cat {work}/answer.txt)\"; echo cache > {work}/.cache && "
                  f"echo 1 > {rewards}/reward.txt")
        try:
            result = await sb.run_grader(["bash", "-c", grader], private=[tests, rewards], collect=rewards,
                                         dest=ctx.local / "write", cwd=work, timeout=60, graded=[work])
        except TypeError as exc:
            raise AssertionError(f"run_grader() does not take graded ({exc}): a sandbox that keeps services must "
                                 "give the grader's command a copy of the graded paths taken while they were frozen") from exc
        assert (ctx.local / "write" / "reward.txt").is_file(), f"the grader could not write in its copy: {result.stderr[-300:]!r}"
        written = (await sb.exec(["cat", f"{work}/answer.txt"], timeout=30)).stdout.strip()
        assert written == "steered", f"the kept service never wrote (the check proves nothing): {written!r}"
        assert "answer=honest" in result.stdout, (
            f"the grader read {result.stdout.strip()!r}: a kept service changed a graded file while the grader's "
            "command ran")
    finally:
        await sb.kill_processes(timeout=30)


async def _interfaces(sb: Sandbox) -> set[str]:
    r = await sb.exec("ls /sys/class/net 2>/dev/null || tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout=30)
    return set(r.stdout.split())


ASK_PROXY = r"""
# CONNECT to a name no allowlist holds, through the proxy the phase's environment names; the first line of the answer
p=${HTTPS_PROXY:-${https_proxy:-}}; p=${p#http://}; p=${p%/}
[ -n "$p" ] || { echo "no proxy variable"; exit 0; }
exec 3<>"/dev/tcp/${p%:*}/${p##*:}" || { echo "proxy unreachable"; exit 0; }
printf 'CONNECT not-listed.invalid:443 HTTP/1.1\r\nHost: not-listed.invalid:443\r\n\r\n' >&3
head -n 1 <&3
"""


async def check_set_network(sb: Sandbox, ctx: CheckContext) -> None:
    """set_network(public) gives interfaces besides loopback, set_network(none) takes them away again. An allowlist,
    on a sandbox that declares ``network_allowlist``, leaves only loopback and a proxy named by the phase's
    environment that refuses a host not listed (elsewhere it may be refused by name, never granted silently). Sends
    no traffic past the sandbox's proxy (the refused name is never resolved)."""
    if ctx.spec.network.online:
        raise SkipCheck("the spec starts online; this check starts from no network")
    if not isinstance(sb, NetworkSwitch):
        raise SkipCheck("the sandbox cannot change its network once started (it is no NetworkSwitch)")
    try:
        await sb.set_network(NetworkPolicy(mode="public"))
    except NotImplementedError as exc:
        raise SkipCheck(f"the sandbox cannot change its network once started: {exc}") from exc
    try:
        assert await _interfaces(sb) - {"lo"}, "after set_network(public) the sandbox has no interface but lo"
        await sb.set_network(NetworkPolicy(mode="none"))
        assert await _interfaces(sb) <= {"lo"}, f"after set_network(none) it still has {await _interfaces(sb)}"
        enforces = ctx.provider is not None and "network_allowlist" in type(ctx.provider).capabilities
        try:
            await sb.set_network(NetworkPolicy(mode="allowlist", allowed_hosts=("pypi.org",)))
        except SandboxError as exc:
            assert not enforces, f"the sandbox declares network_allowlist but refused one: {exc}"
            assert "allowlist" in str(exc), f"refusing an allowlist must say so: {exc}"
        else:
            assert await _interfaces(sb) <= {"lo"}, f"under an allowlist the sandbox has {await _interfaces(sb)}"
            if enforces:
                asked = await sb.exec(["bash", "-c", ASK_PROXY], timeout=60)
                if asked.exit_code == 127:
                    raise SkipCheck("the image has no bash to ask the allowlist's proxy with (/dev/tcp)")
                said = asked.stdout.strip()
                assert " 403 " in said, f"the allowlist's proxy did not refuse a host not listed: {said!r}"
    finally:
        await sb.set_network(NetworkPolicy(mode="none"))
    assert await _interfaces(sb) <= {"lo"}, "the sandbox did not go back to no network"


GRADER_CHECKS = {
    "added_tools_survive": check_added_tools_survive,
    "added_test_tooling": check_added_test_tooling,
    "shadowed_shell": check_shadowed_shell,
    "startup_hooks": check_startup_hooks,
    "reward_prefill": check_reward_prefill,
    "kept_services": check_kept_services,
    "kept_service_write": check_kept_service_write,
    "set_network": check_set_network,
    "install_config": check_install_config,
}
"""The grader's isolation, in the order :data:`tackroom.testing.sandbox_checks.CHECKS` runs them (after the grading
attacks)."""

__all__ = ["GRADER_CHECKS"]
