"""Two-machine scheduling: split jobs between two printers so that all of them finish soonest.

An optimisation puzzle. A print shop has 5 to 7 jobs with known durations and two identical
printers, A and B; a printer runs its jobs one after another, and the day ends when the busier
printer is done (the makespan). The agent submits a full assignment as
``\\boxed{A: 1, 3, 5; B: 2, 4, 6}``: every job number exactly once, on A or B. Each submission is one
turn; the environment answers with the makespan and whether it is optimal. Only an optimal schedule
wins (reward 1.0). There is no partial credit: an episode's return is its final reward, and running
out of the 3 attempts is truncation (return 0).

The instances are drawn so that the greedy rule "longest job first, onto the less busy printer" is
not optimal, which makes the agent actually search.
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
PART = re.compile(r"\s*([AB])\s*:([\d,\s]*)", re.IGNORECASE)

FORMAT_HELP = (
    "Write the full schedule inside \\boxed{}: the job numbers on printer A, a semicolon, then the job "
    "numbers on printer B, for example \\boxed{A: 1, 3, 5; B: 2, 4}. Every job must appear exactly once."
)


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def makespan(durations, jobs_a):
    """Finishing time of the busier printer when the jobs numbered in ``jobs_a`` run on A."""
    load_a = sum(durations[job - 1] for job in jobs_a)
    return max(load_a, sum(durations) - load_a)


def best_split(durations):
    """An optimal set of jobs for printer A, by brute force over all 2^(n-1) splits.

    Job 1 always goes to A (the printers are identical, so this halves the search); among optimal
    splits the one with the smallest bit mask is returned, so the answer is deterministic.
    """
    n = len(durations)
    best = None
    for mask in range(2 ** (n - 1)):
        jobs_a = [1] + [job for job in range(2, n + 1) if mask >> (job - 2) & 1]
        if best is None or makespan(durations, jobs_a) < makespan(durations, best):
            best = jobs_a
    return best


def greedy_makespan(durations):
    """Makespan of the "longest job first, onto the less busy printer" rule."""
    loads = [0, 0]
    for duration in sorted(durations, reverse=True):
        loads[loads.index(min(loads))] += duration
    return max(loads)


class ScheduleEnv:
    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns
        self._turn = 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        while True:  # draw until greedy play falls short (about two draws in five qualify)
            self._durations = [rng.randint(2, 20) for _ in range(rng.randint(5, 7))]
            self._best = best_split(self._durations)
            self._optimum = makespan(self._durations, self._best)
            if greedy_makespan(self._durations) > self._optimum:
                break
        self._turn = 0
        self._done = False
        jobs = "\n".join(f"  job {job}: {hours} hours" for job, hours in enumerate(self._durations, 1))
        observation = (
            f"A print shop has {len(self._durations)} jobs and two identical printers, A and B. A printer "
            "runs its jobs one after another. Assign every job to a printer so that the busier printer "
            f"finishes as early as possible.\nJobs:\n{jobs}\n{FORMAT_HELP}\n"
            f"You have {self.max_turns} attempts; after each one I tell you when the busier printer "
            "finishes and whether that is the best possible."
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The episode is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1

        assignment = self._parse(action)
        value = None
        if assignment is None:
            observation, status = f"I could not read a schedule. {FORMAT_HELP}", "invalid"
        else:
            problem = self._infeasibility(*assignment)
            if problem:
                observation, status = f"That schedule is not feasible: {problem}.", "infeasible"
            else:
                value = makespan(self._durations, assignment[0])
                if value == self._optimum:
                    self._done = True
                    observation = f"The busier printer finishes after {value} hours. That is optimal!"
                    return observation, 1.0, True, False, self._info("optimal", value)
                observation = f"The busier printer finishes after {value} hours. A better schedule exists."
                status = "suboptimal"

        if self._turn >= self.max_turns:
            self._done = True
            observation += f" No attempts left; the best possible was {self._optimum} hours."
            return observation, 0.0, False, True, self._info(status, value)
        observation += f" Attempts left: {self.max_turns - self._turn}."
        return observation, 0.0, False, False, self._info(status, value)

    def solution(self) -> list[str]:
        """The optimal split found by brute force, submitted once."""
        jobs_b = [job for job in range(1, len(self._durations) + 1) if job not in self._best]
        listing = f"A: {', '.join(map(str, self._best))}; B: {', '.join(map(str, jobs_b))}"
        return [f"\\boxed{{{listing}}}"]

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        """(jobs on A, jobs on B) as lists of ints, or None when the text is not a schedule."""
        content = last_boxed(action if isinstance(action, str) else "")
        if not content:
            return None
        jobs = {}
        for part in re.split(r"[;|\n]", content):
            match = PART.fullmatch(part)
            if match is None or match.group(1).upper() in jobs:
                return None
            numbers = re.findall(r"\d+", match.group(2))
            if any(len(number) > 3 for number in numbers):  # no such job; int() refuses huge numbers
                return None
            jobs[match.group(1).upper()] = [int(number) for number in numbers]
        return (jobs.get("A", []), jobs.get("B", [])) if jobs else None

    def _infeasibility(self, jobs_a, jobs_b):
        """Why the assignment is not a valid schedule, or "" when it is one."""
        listed = jobs_a + jobs_b
        numbers = range(1, len(self._durations) + 1)
        unknown = sorted({job for job in listed if job not in numbers})
        if unknown:
            return f"there is no job {', '.join(map(str, unknown))}"
        repeated = sorted({job for job in listed if listed.count(job) > 1})
        if repeated:
            return f"job {', '.join(map(str, repeated))} appears more than once"
        missing = [job for job in numbers if job not in listed]
        if missing:
            return f"job {', '.join(map(str, missing))} is not assigned"
        return ""

    def _info(self, status, makespan_hours=None):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status, "makespan": makespan_hours}
