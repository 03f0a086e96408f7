"""``tackroom train --backend tinker``: SkyRL's Tinker API server (JAX backend, runs on CPU) as the trainer.

* :mod:`.loop` runs a training run: the server and the engine up, each part built once, the pipeline, the export;
* :mod:`.pipeline` drives the steps: rollouts ahead of the trainer, within the staleness bound;
* :mod:`.rollouts` draws a batch through ``TackroomGenerator`` on a :mod:`.sampler` (the run's vLLM engine with
  the live LoRA, or the Tinker sampler behind :mod:`.sampling_endpoint`): publish, pin, check;
* :mod:`.step_trainer` turns a batch into advantages and one loss path's forward-backward and optimiser step,
  through :mod:`.client` (the training client's calls) and :mod:`.datums` (Tinker ``Datum`` s, the mismatch);
* :mod:`.records` and :mod:`.run_log` record each step and trajectory; :mod:`.curve` draws the reward curve;
* :mod:`.server` starts and stops the API server in its own uv project; :mod:`.policy` exports the trained LoRA.

Nothing here imports ``tinker`` or torch at import time of the package.
"""
