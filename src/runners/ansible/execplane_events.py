# The ansible runner's event callback (docs/OPERATIONS.md, "Ansible"):
# one JSON object per line, appended to the file named by
# EXECPLANE_ANSIBLE_EVENTS as ansible-playbook runs, flushed after each.
# The runner reads it while the playbook runs (progress) and stores it as
# the attempt's event stream artifact (masked) when it ends.
#
# Written into the attempt's private working directory by the runner; it
# is not a file of any package. Standard library only.
import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: execplane_events
    type: notification
    short_description: execplane's JSON-lines event stream
    description: One JSON object per line for each playbook, play, task, result and the recap.
"""

# Gathered facts kept in a result (the rest of `setup` is left out: it is
# large and says little about what the run did).
GATHERED = (
    "ansible_hostname",
    "ansible_fqdn",
    "ansible_kernel",
    "ansible_architecture",
    "ansible_distribution",
    "ansible_distribution_version",
    "ansible_os_family",
)
SETUP = ("ansible.builtin.setup", "ansible.builtin.gather_facts", "setup", "gather_facts")
SET_FACT = ("ansible.builtin.set_fact", "set_fact")
# The longest text of one result field kept in an event.
MAX_TEXT = 16 * 1024
# The longest line the runner reads (events.rs, MAX_EVENT_LINE), with room
# for the result's own message: a longer result is written without its
# other fields.
MAX_LINE = 1024 * 1024 - 32 * 1024


# The most items of one list or mapping, and the deepest nesting, kept.
MAX_ITEMS = 1000
MAX_DEPTH = 32


def bounded(value, depth=0):
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "...[truncated]"
    if depth >= MAX_DEPTH:
        return "...[too deep]"
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ITEMS]
        return {str(key)[:MAX_TEXT]: bounded(item, depth + 1) for key, item in items}
    if isinstance(value, (list, tuple)):
        return [bounded(item, depth + 1) for item in value[:MAX_ITEMS]]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return bounded(str(value), depth)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "execplane_events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        path = os.environ.get("EXECPLANE_ANSIBLE_EVENTS")
        self._out = open(path, "a", encoding="utf-8") if path else None
        self._task = None

    def _emit(self, event, **fields):
        if self._out is None:
            return
        fields["event"] = event
        line = self._line(fields)
        # Too long for the runner: the result without its fields but its
        # message, then without the facts (the stream's artifact is this
        # file, so what is left out here is left out there too).
        if len(line.encode("utf-8")) > MAX_LINE and isinstance(fields.get("result"), dict):
            fields["result"] = {"msg": fields["result"].get("msg"), "execplane_left_out": True}
            line = self._line(fields)
        if len(line.encode("utf-8")) > MAX_LINE and fields.get("facts"):
            fields["facts"] = {}
            line = self._line(fields)
        self._out.write(line + "\n")
        self._out.flush()

    @staticmethod
    def _line(fields):
        # ensure_ascii=False: a secret with non-ASCII characters stays as the
        # runner's masker knows it, never \u-escaped past it.
        return json.dumps(bounded(fields), sort_keys=True, default=str, ensure_ascii=False)

    def v2_playbook_on_start(self, playbook):
        self._emit("playbook_start", playbook=os.path.basename(playbook._file_name))

    def v2_playbook_on_play_start(self, play):
        self._emit("play_start", play=play.get_name(), hosts=list(play.hosts or []))

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task
        self._emit("task_start", task=task.get_name(), action=task.action)

    def v2_playbook_on_handler_task_start(self, task):
        self._task = task
        self._emit("task_start", task=task.get_name(), action=task.action, handler=True)

    def _result(self, event, result, **extra):
        task = result._task
        # `ansible.legacy.assert`, `assert`: the module it resolved to.
        action = getattr(task, "resolved_action", None) or task.action
        res = dict(result._result)
        facts = res.pop("ansible_facts", None) or {}
        if action in SETUP:
            facts = {key: facts[key] for key in GATHERED if key in facts}
        elif action not in SET_FACT:
            # Other fact modules (service_facts, package_facts, ...) can be
            # large; their facts stay in `result` only when asked for there.
            facts = {}
        # Ansible's own bookkeeping, not the task's result.
        for key in [key for key in res if key.startswith("_ansible")]:
            res.pop(key, None)
        self._emit(
            event,
            host=result._host.get_name(),
            task=task.get_name(),
            action=action,
            changed=bool(res.get("changed", False)),
            facts=facts,
            result=res,
            **extra,
        )

    def v2_runner_on_ok(self, result):
        self._result("runner_ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("runner_failed", result, ignore_errors=bool(ignore_errors))

    def v2_runner_on_unreachable(self, result):
        self._result("runner_unreachable", result)

    def v2_runner_on_skipped(self, result):
        self._result("runner_skipped", result)

    def v2_playbook_on_stats(self, stats):
        recap = {}
        for host in sorted(stats.processed.keys()):
            summary = stats.summarize(host)
            recap[host] = {
                "ok": summary.get("ok", 0),
                "changed": summary.get("changed", 0),
                "failed": summary.get("failures", 0),
                "unreachable": summary.get("unreachable", 0),
                "skipped": summary.get("skipped", 0),
                "rescued": summary.get("rescued", 0),
                "ignored": summary.get("ignored", 0),
            }
        self._emit("stats", recap=recap)
        if self._out is not None:
            self._out.close()
            self._out = None
