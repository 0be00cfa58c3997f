"""The conversations of scripts/bench_agent.py: a code edit (a file of ~150 lines given, one small
change asked, the whole file asked back) and a tool-call loop (tools given, a call, its result,
the answer), as OpenAI chat messages. Kept apart from the script so the file it edits reads as a
file."""

from __future__ import annotations

import json

FILE_NAME = "tasks.py"
FILE = '''"""A small task list kept in a JSON file, with a command line."""

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta

STORE = os.path.expanduser("~/.tasks.json")
PRIORITIES = ("low", "normal", "high")


@dataclass
class Task:
    title: str
    due: str = ""
    priority: str = "normal"
    done: bool = False
    tags: list = field(default_factory=list)

    def is_overdue(self, today):
        if self.done or not self.due:
            return False
        return date.fromisoformat(self.due) < today

    def days_left(self, today):
        if not self.due:
            return None
        return (date.fromisoformat(self.due) - today).days


class TaskList:
    def __init__(self, path=STORE):
        self.path = path
        self.tasks = []
        if os.path.exists(path):
            with open(path) as handle:
                self.tasks = [Task(**item) for item in json.load(handle)]

    def save(self):
        temp = self.path + ".tmp"
        with open(temp, "w") as handle:
            json.dump([asdict(task) for task in self.tasks], handle, indent=2)
        os.replace(temp, self.path)

    def add(self, title, due="", priority="normal", tags=()):
        if priority not in PRIORITIES:
            raise ValueError(f"unknown priority: {priority}")
        if due:
            date.fromisoformat(due)
        task = Task(title, due, priority, False, list(tags))
        self.tasks.append(task)
        return task

    def find(self, title):
        for task in self.tasks:
            if task.title == title:
                return task
        raise KeyError(title)

    def complete(self, title):
        task = self.find(title)
        task.done = True
        return task

    def remove(self, title):
        task = self.find(title)
        self.tasks.remove(task)
        return task

    def overdue(self, today):
        return [task for task in self.tasks if task.is_overdue(today)]

    def due_within(self, today, days):
        end = today + timedelta(days=days)
        found = []
        for task in self.tasks:
            if task.done or not task.due:
                continue
            if today <= date.fromisoformat(task.due) <= end:
                found.append(task)
        return sorted(found, key=lambda task: task.due)

    def by_tag(self, tag):
        return [task for task in self.tasks if tag in task.tags]

    def summary(self):
        counts = {priority: 0 for priority in PRIORITIES}
        for task in self.tasks:
            if not task.done:
                counts[task.priority] += 1
        return counts


def format_task(task, today):
    mark = "x" if task.done else " "
    line = f"[{mark}] {task.title}"
    if task.due:
        left = task.days_left(today)
        if left < 0:
            line += f" (overdue by {-left} days)"
        elif left == 0:
            line += " (due today)"
        else:
            line += f" (due in {left} days)"
    if task.priority != "normal":
        line += f" !{task.priority}"
    if task.tags:
        line += " " + " ".join("#" + tag for tag in task.tags)
    return line


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="tasks")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add")
    add.add_argument("title")
    add.add_argument("--due", default="")
    add.add_argument("--priority", default="normal", choices=PRIORITIES)
    add.add_argument("--tag", action="append", default=[])
    done = commands.add_parser("done")
    done.add_argument("title")
    remove = commands.add_parser("rm")
    remove.add_argument("title")
    show = commands.add_parser("list")
    show.add_argument("--tag", default="")
    show.add_argument("--soon", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    tasks = TaskList()
    today = date.today()
    if args.command == "add":
        tasks.add(args.title, args.due, args.priority, args.tag)
    elif args.command == "done":
        tasks.complete(args.title)
    elif args.command == "rm":
        tasks.remove(args.title)
    else:
        shown = tasks.tasks
        if args.tag:
            shown = tasks.by_tag(args.tag)
        if args.soon:
            shown = tasks.due_within(today, args.soon)
        for task in shown:
            print(format_task(task, today))
        return 0
    tasks.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
EDIT_SYSTEM = ("You are a careful code editor. The user gives you a file and one change to make. Reply with "
               "the complete updated file in a single ```python code block: copy every line exactly as it is, "
               "change only what the change needs, and write nothing before or after the code block.")
EDIT_ASK = ("Rename the method `complete` of `TaskList` to `mark_done`, and update the line that calls it. "
            "Reply with the whole file.")


def edit_messages(text: str = FILE) -> list[dict[str, object]]:
    """The code edit: the file in the user's turn, the change asked, the whole file wanted back."""
    user = f"Here is `{FILE_NAME}`:\n\n```python\n{text}```\n\n{EDIT_ASK}"
    return [{"role": "system", "content": EDIT_SYSTEM}, {"role": "user", "content": user}]


TOOLS = [
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the tests in one file with pytest and return its output.",
        "parameters": {"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string", "description": "the test file, e.g. tests/test_tasks.py"}}}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Return the text of a file in the repository.",
        "parameters": {"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string", "description": "the file's path from the repository's root"}}}}},
]
TINY_TOOLS = [{"type": "function", "function": {**tool["function"], "parameters": {
    "type": "object", "required": ["path"], "properties": {"path": {"enum": ["tests/test_tasks.py", FILE_NAME]}}}}}
    for tool in TOOLS]
"""The tools with a closed set of paths: a model with random weights (the tiny test pair) closes its call."""
TOOL_SYSTEM = "You are a coding assistant working in the user's repository. Use the tools to answer."
TOOL_ASK = "Run the tests in tests/test_tasks.py and tell me which test failed and why."
TEST_OUTPUT = '''============================= test session starts ==============================
collected 6 items

tests/test_tasks.py ..F...                                               [100%]

=================================== FAILURES ===================================
_____________________________ test_due_within_sorts _____________________________

    def test_due_within_sorts(tmp_path):
        tasks = TaskList(str(tmp_path / "tasks.json"))
        tasks.add("later", due="2026-12-10")
        tasks.add("sooner", due="2026-12-02")
        found = tasks.due_within(date(2026, 12, 1), 7)
>       assert [task.title for task in found] == ["sooner", "later"]
E       AssertionError: assert ['sooner'] == ['sooner', 'later']
E         Right contains one more item: 'later'

tests/test_tasks.py:41: AssertionError
=========================== short test summary info ============================
FAILED tests/test_tasks.py::test_due_within_sorts - AssertionError: assert ['sooner'] == ['sooner', 'later']
========================= 1 failed, 5 passed in 0.12s =========================
'''


def tool_messages() -> list[dict[str, object]]:
    """The tool loop's first request: the question that needs a tool."""
    return [{"role": "system", "content": TOOL_SYSTEM}, {"role": "user", "content": TOOL_ASK}]


def tool_result(call: dict[str, str]) -> str:
    """What the tool answers to `call` (its name and JSON arguments): the test run's output for
    `run_tests`, the file for `read_file`, an error otherwise."""
    try:
        arguments = json.loads(call["arguments"] or "{}")
    except json.JSONDecodeError:
        return json.dumps({"error": "the arguments are not JSON"})
    if call["name"] == "run_tests":
        return TEST_OUTPUT
    if call["name"] == "read_file":
        return FILE if str(arguments.get("path", "")).endswith(FILE_NAME) else json.dumps({"error": "no such file"})
    return json.dumps({"error": f"no tool named {call['name']}"})


EXPECTED_CALL = {"id": "call_expected", "name": "run_tests", "arguments": json.dumps({"path": "tests/test_tasks.py"})}
"""The call the question asks for: the answer's history when a server wrote no whole call (seen
on llama-server: a small model's `required` call came back as plain text, issue #38)."""


def answer_messages(call: dict[str, str], call_id: str) -> list[dict[str, object]]:
    """The tool loop's second request: the question, the model's call, the tool's result."""
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]}
    tool = {"role": "tool", "tool_call_id": call_id, "name": call["name"], "content": tool_result(call)}
    return [*tool_messages(), assistant, tool]
