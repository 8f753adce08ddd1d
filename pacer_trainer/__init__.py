"""Pacer's reference trainer: the other end of trainer mode ``external``.

It follows one run, trains the model on each step the run writes and sends the new weights
back, so a run's loop closes on real parts: the engines sample, the orchestrator scores and
writes ``batch.pt``, this trainer takes one policy-gradient step on it, saves the weights as a
Hugging Face folder and acknowledges the step with the new policy version and that folder,
and the run's relay has every engine reload it.

It is small on purpose, a reference rather than a training framework: one optimizer step per
batch, the whole model in memory on the CPU, no sharding. The core (``batch``, ``loss``,
``trainer``) is plain torch on tensors; the shell (``model_files``, ``runs``, ``cli``) reads
and writes files and talks HTTP.

    python -m pacer_trainer --base MODEL_DIR --run ID --api URL --token T   # a hosted run
    python -m pacer_trainer --base MODEL_DIR --output RUN_FOLDER             # python -m workers.run
"""
