"""Click groups with short aliases (`cairn e list`), and the root group's error translation."""

from __future__ import annotations

from typing import Any

import click

from cairn.cli.errors import debug_enabled, translate
from cairn.cli.state import CliState


class AliasedGroup(click.Group):
    """A group whose commands also answer to short names; `aliases` maps alias -> command name."""

    def __init__(self, *args: Any, aliases: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases: dict[str, str] = dict(aliases or {})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # Report the real name, so help and errors say "experiment", not "e".
        _name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else None), command, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_command: dict[str, list[str]] = {}
        for alias, name in self.aliases.items():
            by_command.setdefault(name, []).append(alias)
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            label = f"{name} ({', '.join(by_command[name])})" if name in by_command else name
            rows.append((label, command.get_short_help_str(limit=formatter.width - 6 - len(label))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class RootGroup(AliasedGroup):
    """Translates failures inside any command into one line on stderr and an exit code, so the
    same behaviour holds under `cairn` and under click's test runner."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            replacement = self._translate(ctx, exc)
            if replacement is None:
                raise
            raise replacement from None
        except KeyboardInterrupt as exc:
            replacement = self._translate(ctx, exc)
            assert replacement is not None
            raise replacement from None

    @staticmethod
    def _translate(
        ctx: click.Context, exc: BaseException
    ) -> click.ClickException | click.exceptions.Exit | None:
        if debug_enabled() and not isinstance(exc, click.ClickException | click.exceptions.Exit):
            return None
        state = ctx.find_object(CliState)
        master = state.master_target if state is not None else "the master"
        return translate(exc, master)
