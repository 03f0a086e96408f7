"""Every hook a tackroom plugin may implement. One function per hook.

A plugin is a module (or object) named by an entry point in the group ``tackroom``; it implements any of these
with ``@tackroom.hookimpl``. The registration hooks (one per plugin kind) receive a :class:`~tackroom.Registrar`
and call ``register.add_<kind>`` with a class or a :class:`~tackroom.PluginSpec`; the lifecycle hooks observe or
steer trials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tackroom._markers import hookspec

if TYPE_CHECKING:
    from tackroom._errors import ErrorClass
    from tackroom._registrar import Registrar
    from tackroom._trial import Trial, TrialResult


@hookspec
def tackroom_harnesses(register: Registrar) -> None:
    """Register harness classes.

    Called once when the plugin manager loads plugins. Call ``register.add_harness(MyHarness)`` for
    each :class:`~tackroom.Harness` subclass, or ``register.add_harness(MINE)`` with a
    :class:`~tackroom.PluginSpec` that the class takes too, to defer importing a heavy module until
    the harness is used.
    """


@hookspec
def tackroom_sandboxes(register: Registrar) -> None:
    """Register sandbox provider classes.

    Called once when the plugin manager loads plugins. Call ``register.add_sandbox(MyProvider)`` for
    each :class:`~tackroom.SandboxProvider` subclass; pass a :class:`~tackroom.PluginSpec` to keep a
    cloud SDK out of ``tackroom plugins`` until the sandbox is selected.
    """


@hookspec
def tackroom_verifiers(register: Registrar) -> None:
    """Register verifier classes.

    Called once when the plugin manager loads plugins. Call ``register.add_verifier(MyVerifier)``
    for each :class:`~tackroom.Verifier` subclass (or a :class:`~tackroom.PluginSpec` naming one).
    """


@hookspec
def tackroom_losses(register: Registrar) -> None:
    """Register policy losses.

    Called once when the plugin manager loads plugins. Call ``register.add_loss(LossSpec(name=…,
    fn="pkg.module:function", aggregation=…))``; a string ``fn`` is imported only when the trainer
    needs it, so torch stays out of every other command.
    """


@hookspec
def tackroom_executors(register: Registrar) -> None:
    """Register executors: where trial attempts run (``[runtime] executor``).

    Called once when the plugin manager loads plugins. Call ``register.add_executor(MyExecutor)``
    for an :class:`~tackroom.executors.Executor` subclass (core's ``asyncio``), or a
    :class:`~tackroom.PluginSpec` with ``options=MyOptions`` to import a heavy module (Ray, for
    ``tackroom-ray``'s ``ray``) only when the executor is selected; ``options`` is the pydantic
    model that validates the ``[runtime.mine]`` table before that.
    """


@hookspec
def tackroom_commands(app: Any) -> None:
    """Add sub-commands to the ``tackroom`` CLI.

    Called once when the CLI starts, with the root ``typer.Typer`` app. Add a command group
    (``app.add_typer(images_app, name="images")``) or commands (``@app.command()``). Import heavy
    modules inside the command functions, not at module level, so every other command stays fast.
    """


@hookspec(firstresult=True)
def tackroom_policy_gateway(base_url: str, model: str | None, api_key: str, tokenizer: str) -> Any:
    """Provide the policy gateway that chat-only harnesses reach their model through.

    Called by tackroom-app's policy routing (``tackroom run``, the matrix, the trainer) when a
    harness speaks only chat (capability ``chat``, or ``[policy] gateway = true``) and a policy
    endpoint is set: ``base_url`` is the engine's OpenAI base URL, ``model`` the served model
    (``None``: the engine's first), ``tokenizer`` a tokenizer folder or name that must match the
    engine. Return an async context manager, not yet entered, that serves a gateway in front of that
    engine; entered, it yields an object whose ``trial_sessions(sampling=..., label=...)`` returns a
    :attr:`~tackroom._runtime.TrialPlugins.policy_for`: a fresh :class:`~tackroom.PolicySession` per
    trial attempt, with exact token ids merged into the trajectory. The first non-``None`` answer
    wins; ``tackroom-gateway`` implements it. With no implementation, routing a chat-only harness is
    a :class:`~tackroom._errors.ConfigError`.
    """


@hookspec
def tackroom_trial_started(trial: Trial) -> None:
    """Observe a trial attempt as it starts.

    Called by the trial runtime right before the sandbox starts, once per attempt, with the
    :class:`~tackroom._trial.Trial`. Return value ignored. Exceptions are logged and swallowed: an
    observer never breaks a trial.
    """


@hookspec
def tackroom_trial_finished(trial: Trial, result: TrialResult) -> None:
    """Observe a finished trial attempt.

    Called by the trial runtime after teardown with the :class:`~tackroom._trial.Trial` and its
    :class:`~tackroom._trial.TrialResult` (which carries the reward or the classified error). Return
    value ignored; exceptions are logged and swallowed.
    """


@hookspec(firstresult=True)
def tackroom_classify_error(error: BaseException, phase: str) -> ErrorClass | None:
    """Classify a failure as ``"infra"``, ``"model"`` or ``"task"``.

    Called by the trial runtime for every exception a trial phase raises (``phase`` is one of
    ``sandbox_start``, ``harness_setup``, ``harness_run``, ``verify``, ``teardown``). The first
    non-``None`` answer wins; return ``None`` to leave the decision to other plugins and finally to
    the built-in rules (a :class:`~tackroom._errors.TackroomError`'s own ``error_class``, timeouts
    in ``harness_run`` are ``model``, anything else ``infra``). ``infra`` errors are retried.
    """
