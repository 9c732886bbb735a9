"""`wasm-runner usage report|budgets`: what a workspace used, and its budgets for the month."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import get_args

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import print_json, table
from wasm_runner_client.cli.status import OK, CliError, guarded
from wasm_runner_protocol.usage import UsageEntry, UsageUnit


@guarded
def report_command(args: argparse.Namespace) -> int:
    query = dict(workspace=args.workspace, member=args.member, key=args.key, unit=args.unit, since=args.since,
                 until=args.until, group_by=args.group_by)
    with connect(args) as client:
        if args.csv:
            sys.stdout.write(client.usage_csv(**query))
            return OK
        report = client.usage(**query)
    if args.json:
        print_json(report)
        return OK
    first: dict[str, tuple[str, Callable[[UsageEntry], str]]] = {
        "day": ("DAY", lambda e: e.day or ""), "key": ("PAYER", lambda e: f"{e.payer_kind}:{e.payer_id}")}
    grouped = first.get(args.group_by)
    headers = ["WORKSPACE", *([grouped[0]] if grouped else []), "UNIT", "AMOUNT"]
    table(headers, [[e.workspace, *([grouped[1](e)] if grouped else []), e.unit, f"{e.amount:g}"]
                    for e in report.entries])
    return OK


@guarded
def budgets_command(args: argparse.Namespace) -> int:
    changes: dict[str, float | None] = dict.fromkeys(args.unset)
    for unit, amount in args.set:
        if unit not in get_args(UsageUnit):
            raise CliError(f"unknown unit {unit!r}", hint="one of " + ", ".join(get_args(UsageUnit)))
        try:
            changes[unit] = float(amount)
        except ValueError:
            raise CliError(f"--set {unit}= takes a number (got {amount!r})") from None
    with connect(args) as client:
        state = (client.set_workspace_budgets(args.workspace, changes)  # type: ignore[arg-type]  # units checked
                 if changes else client.workspace_budgets(args.workspace))
    if args.json:
        print_json(state)
        return OK
    print(f"{state.workspace}: budgets for the month since {state.since}")
    table(["UNIT", "BUDGET", "USED", "SET BY"],
          [[b.unit, f"{b.budget:g}", f"{b.used:g}", b.source] for b in state.budgets])
    return OK
