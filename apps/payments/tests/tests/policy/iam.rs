//! A small evaluator of the IAM forms the template uses: IAM's `StringLike`, a role's inline
//! statements, and whether they allow an item request on a table (conditions on
//! `dynamodb:LeadingKeys` evaluated, any other condition taken as holding), with the evaluator
//! checked on the table-wide grant the template had before keys were scoped.

use serde_json::{json, Value};

use crate::{list, payment_record};

/// IAM's `StringLike`: `*` any run, `?` one character.
pub(crate) fn like(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi, mut star, mut mark) = (0, 0, None, 0);
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// One item request: `action` on the item whose partition key is `key` in table `table`
/// (a logical id).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) action: &'a str,
    pub(crate) table: &'a str,
    pub(crate) key: &'a str,
}

pub(crate) fn statements(t: &Value, role: &str) -> Vec<Value> {
    let policies = t["Resources"][role]["Properties"]["Policies"].as_array().expect("role has inline policies");
    policies.iter().flat_map(|p| list(&p["PolicyDocument"]["Statement"])).collect()
}

pub(crate) fn action_matches(statement: &Value, action: &str) -> bool {
    // Action names are case-insensitive in IAM.
    list(&statement["Action"]).iter().filter_map(Value::as_str).any(|a| like(&a.to_lowercase(), &action.to_lowercase()))
}

/// Whether a statement's resource may be `table`. An allow is read generously (anything that is
/// not plainly another resource counts), a deny strictly: the test must not lean on a deny it
/// cannot read.
pub(crate) fn resource_matches(statement: &Value, table: &str, generous: bool) -> bool {
    list(&statement["Resource"]).iter().any(|r| match r {
        Value::String(s) => s == "*" || generous,
        Value::Object(o) => match o.get("Fn::GetAtt") {
            Some(att) => att[0] == table && att[1] == "Arn",
            None => generous,
        },
        _ => generous,
    })
}

/// Whether a statement's conditions hold for the request. Conditions on `dynamodb:LeadingKeys`
/// are evaluated; any other condition is taken as holding, so a grant hidden behind one counts.
pub(crate) fn conditions_hold(statement: &Value, request: Request<'_>) -> bool {
    let Some(conditions) = statement["Condition"].as_object() else { return true };
    conditions.iter().all(|(operator, keys)| {
        let Some(values) = keys.get("dynamodb:LeadingKeys") else { return true };
        let patterns: Vec<String> = list(values).iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
        let base = operator.trim_start_matches("ForAllValues:").trim_start_matches("ForAnyValue:");
        match base {
            "StringLike" => patterns.iter().any(|p| like(p, request.key)),
            "StringEquals" => patterns.iter().any(|p| p == request.key),
            // Null "false": the key is present, which it is for every item action.
            "Null" => patterns == ["false"],
            "StringNotLike" => !patterns.iter().any(|p| like(p, request.key)),
            "StringNotEquals" => !patterns.iter().any(|p| p == request.key),
            other => panic!("the test cannot read condition {other} on dynamodb:LeadingKeys; extend it"),
        }
    })
}

/// Whether the role's inline policies allow the request: an allow matches and no deny does.
pub(crate) fn allows(t: &Value, role: &str, request: Request<'_>) -> bool {
    let statements = statements(t, role);
    let applies = |s: &Value, generous: bool| {
        action_matches(s, request.action) && resource_matches(s, request.table, generous) && conditions_hold(s, request)
    };
    let allowed = statements.iter().any(|s| s["Effect"] == "Allow" && applies(s, true));
    let denied = statements.iter().any(|s| s["Effect"] == "Deny" && applies(s, false));
    allowed && !denied
}

/// Every policy statement in `value`, wherever it sits (a role's inline policies, a managed
/// policy, a queue policy), each branch of an `Fn::If` around a statement counted as a statement.
pub(crate) fn all_statements(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(o) => {
            for (key, inner) in o {
                if key == "Statement" {
                    for statement in list(inner) {
                        match statement.get("Fn::If") {
                            Some(branches) => out.extend(
                                list(branches).into_iter().skip(1).filter(|b| b != &json!({"Ref": "AWS::NoValue"})),
                            ),
                            None => out.push(statement),
                        }
                    }
                } else {
                    all_statements(inner, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| all_statements(v, out)),
        _ => {}
    }
}

/// Whether an allow statement grants `action`: its `Action` matches (wildcards included), or its
/// `NotAction` leaves it out.
pub(crate) fn grants(statement: &Value, action: &str) -> bool {
    if statement["Effect"] != "Allow" {
        return false;
    }
    if statement.get("NotAction").is_some() {
        let excluded = list(&statement["NotAction"]);
        return !excluded.iter().filter_map(Value::as_str).any(|a| like(&a.to_lowercase(), &action.to_lowercase()));
    }
    action_matches(statement, action)
}

#[test]
fn the_evaluator_reads_the_old_table_wide_grant_as_a_grant() {
    // The policy before keys were scoped: the same evaluator must call it unsafe, or the tests
    // above prove nothing.
    let t = json!({"Resources": {"R": {"Properties": {"Policies": [{"PolicyDocument": {"Statement": [{
        "Effect": "Allow",
        "Action": ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"],
        "Resource": {"Fn::GetAtt": ["IdempotencyTable", "Arn"]}
    }]}}]}}}});
    let payment = payment_record();
    assert!(allows(&t, "R", Request { action: "dynamodb:DeleteItem", table: "IdempotencyTable", key: &payment }));
    assert!(like("payments#*", "payments#pay_1") && !like("payments#*", "email#pay_1") && like("a?c*", "abcde"));
}
