"""The main jobs' checkpoints: each a step_NNNNNN folder under the job's
--checkpoint folder, written by torch.distributed.checkpoint."""
import os


def latest_checkpoint(root):
    """The newest complete checkpoint under `root` (a step_NNNNNN folder whose
    metadata torch.distributed.checkpoint wrote last), or None."""
    if not root or not os.path.isdir(root):
        return None
    done = [d for d in os.listdir(root) if d.startswith("step_") and os.path.exists(os.path.join(root, d, ".metadata"))]
    return os.path.join(root, max(done)) if done else None
