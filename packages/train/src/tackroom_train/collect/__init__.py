"""``tackroom collect``: demonstrations for a supervised warm start.

A task set runs under any harness against a teacher (any OpenAI-compatible endpoint, or a scripted teacher served
for the run), the trials whose reward reaches a threshold are kept, and each is written as token-exact
:class:`~tackroom_train.demonstrations.Demonstration` rows in the *policy's* tokenizer, with a summary.

- :mod:`~tackroom_train.collect.config`: the config (a run config plus ``[collect]``) and its flags;
- :mod:`~tackroom_train.collect.run`: the run and which trials are kept;
- :mod:`~tackroom_train.collect.recording`: the engine calls the gateway (or a token-level harness) recorded;
- :mod:`~tackroom_train.collect.recording_proxy`: the chat requests of a harness that calls the teacher directly;
- :mod:`~tackroom_train.collect.conversion`: recorded ids copied, or the conversation re-rendered
  (:mod:`~tackroom_train.collect.rendering`);
- :mod:`~tackroom_train.collect.summary`: the counts and per-trial verdicts;
- :mod:`~tackroom_train.collect.teacher`: the scripted teacher, an engine a Python function writes the replies of;
- :mod:`~tackroom_train.collect.cli`: the command.
"""
