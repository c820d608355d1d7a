"""What a gpufleet command line may not do, judged before invoke runs anything: give an option twice, or name
a second command.

invoke reads a command line as a chain of tasks, each with its options (`invoke build --fast test`). An option
that takes a value and is given a second time is no longer waiting for one, so invoke reads its second value as
the next token: a task name if it is one (pyinvoke/invoke@3.0.3 invoke/parser/parser.py, ParseMachine.handle and
waiting_for_flag_value, whose TODO lists "you already gave that flag!" as not done). `invoke render --stack dev
--stack metal` therefore rendered dev and then ran `invoke metal`, a real Ansible rollout. No gpufleet command is
meant to be chained, so both are refused with exit 2 and nothing runs.

Pure: the tokens after the program's own options, and invoke's parser contexts (their `flags`,
`inverse_flags` and each flag's `name`, `takes_value`, `kind`), in; a message or None out. `parse_error` words
invoke's own parse errors for the one line the command line prints.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

HINT = "`invoke --list` lists the tasks, `invoke --help TASK` a task's options"


def _flag(context: Any, name: str) -> Any:
    """The flag `name` (`--out`, `-o`, `--no-strict`) means in `context`, or None. invoke's flag table is a
    Lexicon, whose aliases (the short flags) answer `in` and `[]` but not `dict.get`."""
    if name in context.flags:
        return context.flags[name]
    if name in context.inverse_flags:
        return context.flags[context.inverse_flags[name]]
    return None


def _options(token: str, context: Any) -> list[tuple[str, Any, str | None]]:
    """The options one token names in `context`, each as (as typed, the flag, its value if the token holds it):
    `--out=x`, `-o` and `-ox` (a short option and its value), `-cv` (two short switches), as invoke splits
    them (parser.py, Parser.parse_argv)."""
    if token.startswith("--") or len(token) == 2:
        name, equals, value = token.partition("=")
        flag = _flag(context, name)
        return [(name, flag, value if equals else None)] if flag is not None else []
    head = _flag(context, token[:2])
    if head is not None and head.takes_value:
        return [(token[:2], head, token[2:].removeprefix("="))]
    found = [(f"-{c}", _flag(context, f"-{c}"), None) for c in token[1:]]
    return [(typed, flag, None) for typed, flag, _ in found if flag is not None]


def refused(argv: Sequence[str], contexts: Mapping[str, Any]) -> str | None:
    """Why this command line must not run (an option given twice, a second command), or None. `contexts` maps
    each task name (and alias) to its parser context."""
    body = list(argv[: argv.index("--")] if "--" in argv else argv)
    task, context = "", None
    seen: dict[str, str | None] = {}
    i = 0
    while i < len(body):
        token, i = body[i], i + 1
        if context is not None and token.startswith("-") and len(token) > 1:
            for typed, flag, value in _options(token, context):
                if flag.takes_value and value is None and i < len(body):
                    value, i = body[i], i + 1
                if flag.kind is list:
                    continue
                if flag.name in seen:
                    return _twice(task, _long(flag, typed), seen[flag.name], value, contexts)
                seen[flag.name] = value
        elif token in contexts:
            if context is not None:
                return (
                    f"`{token}` after `invoke {task} ...` would run a second command; gpufleet runs one command "
                    f"at a time and nothing was run: give `invoke {token}` a line of its own, or if `{token}` is "
                    f"a value, put it after its option (e.g. --stack {token})"
                )
            task, context, seen = token, contexts[token], {}
    return None


def _long(flag: Any, typed: str) -> str:
    """`--stack` for `-s`: the option's long name, as `invoke --help TASK` lists it."""
    return next((f"--{n}" for n in flag.names if len(n) > 1), typed)


def _twice(task: str, typed: str, first: str | None, second: str | None, contexts: Mapping[str, Any]) -> str:
    values = f" ({first}, then {second})" if first is not None and second is not None else ""
    also = (
        f"; invoke would have read `{second}` as a second command to run"
        if second is not None and second in contexts
        else ""
    )
    return f"{typed} is given twice to `invoke {task}`{values}{also}; nothing was run: give each option once"


def parse_error(said: str, tasks: Sequence[str], stacks: Sequence[str]) -> str:
    """invoke's parse error with what to do: a close task name (`invoke plann`), the option a stack name was
    meant for (`invoke plan dev`), the value an option lacks (`invoke plan --stack`)."""
    unknown = re.fullmatch(r"No idea what '(.+)' is!", said)
    if unknown and unknown.group(1) in stacks:
        return f"{said} (a stack is named with --stack: `--stack {unknown.group(1)}`; {HINT})"
    if unknown and not unknown.group(1).startswith("-"):
        close = difflib.get_close_matches(unknown.group(1), tasks, n=1)
        if close:
            return f"{said} (did you mean `invoke {close[0]}`? {HINT})"
    bare = re.fullmatch(r"Flag <Argument: ([\w-]+)[^>]*> needed value and was not given one!", said)
    if bare:
        option = "--" + bare.group(1).replace("_", "-")
        return f"{option} needs a value ({HINT})"
    return f"{said} ({HINT})"
