//! Per-runner views of an attempt's typed result (docs/INGRESS.md, "The
//! console"): what each runner's result says, laid out for a person, from
//! the result types of `src/contract/ops`. Read as JSON, field by field, so
//! a result of an older shape still shows what it has; the whole result is
//! always there below, as JSON.

use maud::{html, Markup};
use serde_json::Value;

/// The saved plan's digest an `opentofu.plan` result names (what an
/// approval quotes: `result.plan.artifact`).
pub fn plan_digest(result_json: Option<&str>) -> Option<String> {
    let result: Value = serde_json::from_str(result_json?).ok()?;
    result["plan"]["artifact"].as_str().map(str::to_owned)
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The view of `operation`'s result, then the result itself.
pub fn result(operation: &str, result_json: Option<&str>) -> Markup {
    let Some(raw) = result_json else {
        return html! {};
    };
    let result: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let runner = operation.split('.').next().unwrap_or_default();
    let view = match runner {
        "ansible" => ansible(&result),
        "opentofu" => opentofu(&result),
        "helm" => helm(&result),
        "kubernetes" => kubernetes(&result),
        "ssh" => ssh(&result),
        "verify" => verification(&result),
        _ => html! {},
    };
    html! {
        section.view #result data-runner=(runner) {
            h2 { "Result" }
            (view)
            details {
                summary { "As JSON" }
                pre { (serde_json::to_string_pretty(&result).unwrap_or_else(|_| raw.to_owned())) }
            }
        }
    }
}

fn ansible(result: &Value) -> Markup {
    let recap = result["recap"].as_object().cloned().unwrap_or_default();
    let failed: Vec<&Value> = result["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|evidence| evidence["passed"] == Value::Bool(false))
        .collect();
    html! {
        p {
            @if result["check_mode"] == Value::Bool(true) { span.badge { "check mode" } " " }
            "exit code " (text(&result["exit_code"])) " · " (text(&result["tasks"])) " tasks"
        }
        table #ansible-recap {
            thead { tr { th { "Host" } th.num { "ok" } th.num { "changed" } th.num { "failed" } th.num { "unreachable" } th.num { "skipped" } } }
            tbody {
                @for (host, line) in &recap {
                    tr data-host=(host) {
                        td { (host) }
                        td.num { (text(&line["ok"])) }
                        td.num.change { (text(&line["changed"])) }
                        td.num.destroy { (text(&line["failed"])) }
                        td.num.destroy { (text(&line["unreachable"])) }
                        td.num { (text(&line["skipped"])) }
                    }
                }
            }
        }
        @if !failed.is_empty() {
            h3 { "Failed checks" }
            ul #ansible-failed {
                @for evidence in failed {
                    li { strong { (text(&evidence["host"])) } ": " (text(&evidence["task"])) " (event line " (text(&evidence["event_line"])) ")" }
                }
            }
        }
        @for problem in result["problems"].as_array().into_iter().flatten() {
            p.error { (text(problem)) }
        }
    }
}

fn opentofu(result: &Value) -> Markup {
    let plan = &result["plan"];
    let outputs = result["outputs"].as_object().cloned().unwrap_or_default();
    html! {
        p { "module " (text(&result["module"])) " · workspace " (text(&result["workspace"])) " · backend " (text(&result["backend"])) }
        @if plan.is_object() {
            p #plan-summary {
                span.add { "+" (text(&plan["add"])) " to add" } " · "
                span.change { "~" (text(&plan["change"])) " to change" } " · "
                span.destroy { "−" (text(&plan["destroy"])) " to destroy" }
            }
            table #plan-changes {
                thead { tr { th { "Resource" } th { "Actions" } } }
                tbody {
                    @for change in plan["changes"].as_array().into_iter().flatten() {
                        tr {
                            td.mono { (text(&change["address"])) }
                            td { (change["actions"].as_array().into_iter().flatten().map(text).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                }
            }
        }
        @if !outputs.is_empty() {
            h3 { "Outputs" }
            table #tofu-outputs {
                tbody {
                    @for (name, output) in &outputs {
                        tr {
                            td.mono { (name) }
                            td {
                                @if output["sensitive"] == Value::Bool(true) { span.muted { "(sensitive)" } }
                                @else { (text(&output["value"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn helm(result: &Value) -> Markup {
    html! {
        dl.facts #helm-release {
            dt { "Release" } dd { (text(&result["release"])) " in " (text(&result["namespace"])) }
            dt { "Chart" } dd { (text(&result["chart"])) }
            dt { "Revision" } dd { (text(&result["revision"])) }
            dt { "Status" } dd { (text(&result["status"])) }
        }
        @if let Some(notes) = result["notes"].as_str() {
            h3 { "Notes" }
            pre #helm-notes { (notes) }
        }
    }
}

fn kubernetes(result: &Value) -> Markup {
    html! {
        p { "cluster " (text(&result["cluster"])) @if result["dry_run"] == Value::Bool(true) { " · " span.badge { "dry run" } } }
        table #kubernetes-objects {
            thead { tr { th { "Object" } th { "Action" } th { "Changed fields" } } }
            tbody {
                @for object in result["objects"].as_array().into_iter().flatten() {
                    tr {
                        td.mono {
                            (text(&object["kind"])) "/"
                            @if let Some(namespace) = object["namespace"].as_str() { (namespace) "/" }
                            (text(&object["name"]))
                        }
                        td { (text(&object["action"])) }
                        td.mono {
                            (object["changed_fields"].as_array().into_iter().flatten().map(text).collect::<Vec<_>>().join(", "))
                            @if object["changed_fields_truncated"] == Value::Bool(true) { " …" }
                        }
                    }
                }
            }
        }
    }
}

fn ssh(result: &Value) -> Markup {
    html! {
        table #ssh-nodes {
            thead { tr { th { "Node" } th { "Destination" } th.num { "Exit code" } th.num { "ms" } th { "Error" } } }
            tbody {
                @for node in result["nodes"].as_array().into_iter().flatten() {
                    tr {
                        td { (text(&node["target"])) }
                        td.mono { (text(&node["destination"])) }
                        td.num { (text(&node["exit_code"])) }
                        td.num { (text(&node["duration_ms"])) }
                        td { (text(&node["error"])) }
                    }
                }
            }
        }
    }
}

fn verification(result: &Value) -> Markup {
    html! {
        p { @if result["passed"] == Value::Bool(true) { span.badge.succeeded { "passed" } } @else { span.badge.failed { "not passed" } }
            " · " (text(&result["consecutive_passes"])) " consecutive pass(es)" }
        table #samples {
            thead { tr { th.num { "#" } th { "At" } th.num { "ms" } th { "Reached" } th { "Assertions" } th { "Error" } } }
            tbody {
                @for sample in result["samples"].as_array().into_iter().flatten() {
                    tr {
                        td.num { (text(&sample["n"])) }
                        td { (text(&sample["at"])) }
                        td.num { (text(&sample["latency_ms"])) }
                        td { (text(&sample["reached"])) }
                        td {
                            @for assertion in sample["assertions"].as_array().into_iter().flatten() {
                                span class=(if assertion["passed"] == Value::Bool(true) { "add" } else { "destroy" }) {
                                    (text(&assertion["name"])) ": expected " (text(&assertion["expected"])) ", got " (text(&assertion["actual"]))
                                }
                                br;
                            }
                        }
                        td { (text(&sample["error"])) }
                    }
                }
            }
        }
    }
}
