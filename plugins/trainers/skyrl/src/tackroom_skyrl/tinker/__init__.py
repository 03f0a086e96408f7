"""``tackroom train --backend tinker``: SkyRL's Tinker API server (JAX backend, runs on CPU) as the trainer.

* :mod:`.server` starts and stops the API server in its own uv project;
* :mod:`.sampling_endpoint` serves vLLM's ``/v1/completions`` (token-id prompts)
  over a Tinker sampling client, so harnesses and the policy gateway run unchanged;
* :mod:`.datums` turns the generator's output into Tinker ``Datum`` s and a loss;
* :mod:`.loop` is the RL loop; :mod:`.curve` writes the reward curve.

Nothing here imports ``tinker`` or torch at import time of the package.
"""
