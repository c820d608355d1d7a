"""The scheduler's own bad-input error (scheduler never imports infra); tasks.py maps it to exit code 2."""

from __future__ import annotations


class SchedulerConfigError(Exception):
    """Bad scheduling input: carries every problem found, each naming its key path."""

    exit_code = 2

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)
