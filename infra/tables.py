"""Terminal tables that never cut a value: a table when its words fit, one record per row when they do not.

Rich cuts a word that does not fit its column with an ellipsis (Rich docs, "Tables": column `overflow`,
default "ellipsis"), so at 80 columns a plan would show `g6e…` and `$2,…`; kubectl and terraform never cut a
value. Every command's table goes through `print_table`, which picks one of three forms:

- the table as Rich lays it out, when every cell fits on one line;
- the table with column widths chosen here, when every column can be as wide as its longest word: cells wrap
  between words. The widths are set, not left to Rich, because Rich shrinks the widest columns first and can
  cut a long word in one column while another column still has room to wrap;
- one record per row (a heading, then a field per line, as `kubectl describe`), when even that does not fit.

A table of sentences that quote paths, ARNs and commands (preflight's) may name `fold_over`: a word longer than
that folds across lines of its column, every character kept, rather than forcing the record form on every
terminal; all other words stay whole.

The full values stay in the machine-readable outputs (`--json`, plan.json, CSV) as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text  # a str is Rich markup, as `Table.add_row` takes it; a Text is shown as it is
Justify = Literal["left", "right"]


def plain(console: Console, cell: Cell) -> str:
    """What the terminal shows of a cell: markup such as `[bold]` takes no room."""
    return cell.plain if isinstance(cell, Text) else console.render_str(cell).plain


def numeric(cell: str) -> bool:
    """Counts, ranges (0-2) and money ($1,234.50) line up on the right."""
    return cell.lstrip("$")[:1].isdigit()


def _longest_word(cell: str) -> int:
    return max((cell_len(word) for word in cell.split()), default=0)


def _longest_line(cell: str) -> int:
    return max((cell_len(line) for line in cell.splitlines()), default=0)


def column_bounds(
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    no_wrap: Collection[int] = (),
    fold_over: int | None = None,
) -> tuple[list[int], list[int]]:
    """Each column's least width without cutting a word (its longest word, or `fold_over` where that is less;
    its longest cell where it must not wrap) and its width with every cell on one line."""
    columns = list(zip(head, *rows, strict=True))
    least = [
        max(map(_longest_line, column))
        if i in no_wrap
        else min(max(map(_longest_word, column)), fold_over or sys.maxsize)
        for i, column in enumerate(columns)
    ]
    most = [max(map(_longest_line, column)) for column in columns]
    return least, most


def frame(columns: int) -> int:
    """The width a default Rich table spends around its cells: one space of padding each side of a cell and a
    border line between and around the columns."""
    return 3 * columns + 1


def narrowest(
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    no_wrap: Collection[int] = (),
    fold_over: int | None = None,
) -> int:
    """The least width the table can take without cutting a word (but those over `fold_over`, which fold)."""
    return sum(column_bounds(head, rows, no_wrap, fold_over)[0]) + frame(len(head))


def fitted_widths(least: Sequence[int], most: Sequence[int], room: int) -> list[int]:
    """Column widths within `room` (cells only), each at least its longest word. The spare room goes first to
    the columns that need the least of it to show every cell on one line (short values and headers do not
    wrap), then a column at a time to the one that still lacks the most (long sentences wrap evenly)."""
    widths = list(least)
    spare = room - sum(widths)
    for i in sorted(range(len(widths)), key=lambda i: most[i] - least[i]):
        if 0 < most[i] - widths[i] <= spare:
            spare -= most[i] - widths[i]
            widths[i] = most[i]
    while spare > 0:
        lack = [m - w for w, m in zip(widths, most, strict=True)]
        i = max(range(len(widths)), key=lack.__getitem__)
        if lack[i] <= 0:
            break
        widths[i] += 1
        spare -= 1
    return widths


def print_table(
    console: Console,
    title: str,
    head: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    justify: Sequence[Justify] | None = None,
    no_wrap: Collection[int] = (),
    fold_over: int | None = None,
    key: int = 1,
    heading: Callable[[Sequence[Cell]], Cell] | None = None,
) -> bool:
    """Print a table in the terminal's width without cutting a value; True when it came out as a table.

    `justify` is per column (default: right for a column of numbers, see `numeric`); `no_wrap` the columns
    whose cells must stay on one line; `fold_over` the length past which a word may fold. In the record form
    the first `key` cells name each record (`heading(row)`, default "<first header> <first cell>") and the
    others are its fields."""
    shown = [[plain(console, c) for c in row] for row in rows]
    aligns: list[Justify] = (
        list(justify)
        if justify is not None
        else [
            "right" if column and all(map(numeric, column)) else "left" for column in zip(*shown, strict=True)
        ]
        or ["left"] * len(head)
    )
    least, most = column_bounds(head, shown, no_wrap, fold_over)
    room = console.width - frame(len(head))
    if sum(least) > room:
        print_records(console, title, head, rows, key=key, heading=heading)
        return False
    table = Table(title=title, title_justify="left")
    fit = sum(most) <= room
    widths = most if fit else fitted_widths(least, most, room)
    for i, name in enumerate(head):
        table.add_column(
            name, justify=aligns[i], no_wrap=i in no_wrap, width=None if fit else widths[i], overflow="fold"
        )
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return True


def print_records(
    console: Console,
    title: str,
    head: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    key: int = 1,
    heading: Callable[[Sequence[Cell]], Cell] | None = None,
) -> None:
    """A narrow terminal's form of a table: each row a block headed by its first `key` cells, a field per
    line, the field names in one column and the values wrapping beside them; a field with no value (an empty
    cell) is left out."""
    console.print(Text(title, style="italic"))
    for row in rows:
        name = heading(row) if heading else Text(f"{head[0]} {plain(console, row[0])}")
        record = Table(title=name, title_justify="left", show_header=False, box=None)
        record.add_column(style="bold", no_wrap=True)
        record.add_column(overflow="fold")
        for field, value in zip(head[key:], row[key:], strict=True):
            if plain(console, value):
                record.add_row(field, value)
        console.print(record)
