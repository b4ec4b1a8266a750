"""env.json's document of a run in progress (``runner.Runner``): what the report and ``--resume``
read of where, how and from what the run was made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detbench.run.calls import calls_of
from detbench.run.config import TARGET_REL

if TYPE_CHECKING:
    from detbench.run.runner import Runner


def env_doc(runner: Runner) -> dict[str, Any]:
    """env.json's document of ``runner`` as it stands: its provenance, its plan's order and its
    options (``run_stats`` and ``run_calls`` are added at the end of a call)."""
    c = runner.config
    resumed = list(runner.previous_env.get("resumed_utc") or [])
    if c.resume:
        resumed.append(runner.started_utc)
    return {
        "schema_version": 1,
        "started_utc": runner.previous_env.get("started_utc", runner.started_utc),
        **({"resumed_utc": resumed} if resumed else {}),
        "host": runner.host,
        "git": runner.git,
        "worker": runner.device_env,
        "gpu_state": runner.gpu_state,
        "mode_order": runner.plan.order_json(),
        **({"run_calls": calls} if (calls := calls_of(runner.previous_env)) else {}),
        **({"device_workers": runner.device_envs} if c.devices else {}),
        **(
            {
                "parallel_timing_note": (
                    f"{len(c.device_names)} CPU workers ran side by side with "
                    f"{runner.threads_per_worker} thread(s) each: their timings are not "
                    "comparable with a serial run's"
                )
            }
            if runner.threads_per_worker is not None
            else {}
        ),
        "study": c.study,
        "options": c.options_json(
            runner.workloads, runner.sources, runner.threads_per_worker, TARGET_REL[c.device]
        ),
    }
