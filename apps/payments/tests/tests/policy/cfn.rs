//! A resolver of the CloudFormation intrinsic functions the tests meet: `Fn::Sub`, `Ref` and
//! `Fn::Select` of `Fn::Split` into an ARN, `Fn::If` on one condition, the logical ids a value
//! refers to, and a function's deployed name.

use serde_json::{json, Value};

/// `value` with `Fn::Sub` (its variables' `Fn::Select` of `Fn::Split` included), `Ref` and plain
/// strings resolved for a stack `stack` given `cluster` and `topic`.
pub(crate) fn resolve_arn(value: &Value, cluster: &str, topic: &str, stack: &str) -> String {
    let parameter = |name: &str| match name {
        "KafkaClusterArn" => cluster.to_owned(),
        "KafkaTopic" => topic.to_owned(),
        "AWS::StackName" => stack.to_owned(),
        other => panic!("cannot resolve {other}"),
    };
    match value {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("Ref") => parameter(o["Ref"].as_str().unwrap()),
        Value::Object(o) if o.contains_key("Fn::Select") => {
            let (index, split) = (o["Fn::Select"][0].as_u64().unwrap() as usize, &o["Fn::Select"][1]["Fn::Split"]);
            let whole = resolve_arn(&split[1], cluster, topic, stack);
            whole.split(split[0].as_str().unwrap()).nth(index).expect("the index exists").to_owned()
        }
        Value::Object(o) if o.contains_key("Fn::Sub") => {
            let (text, variables) = match &o["Fn::Sub"] {
                Value::Array(parts) => (parts[0].as_str().unwrap().to_owned(), parts[1].clone()),
                other => (other.as_str().unwrap().to_owned(), json!({})),
            };
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let end = start + rest[start..].find('}').unwrap();
                out.push_str(&rest[..start]);
                let name = &rest[start + 2..end];
                out.push_str(&match variables.get(name) {
                    Some(variable) => resolve_arn(variable, cluster, topic, stack),
                    None => parameter(name),
                });
                rest = &rest[end + 1..];
            }
            out + rest
        }
        other => panic!("cannot resolve {other}"),
    }
}

/// Every logical id a value refers to: `Ref` (an alias `X.Alias` is `X`'s), `Fn::GetAtt`, and
/// `${X}` or `${X.Attr}` in `Fn::Sub`.
pub(crate) fn references(value: &Value, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(o) => {
            for (key, inner) in o {
                match key.as_str() {
                    "Ref" => {
                        out.insert(inner.as_str().unwrap_or_default().split('.').next().unwrap().to_owned());
                    }
                    "Fn::GetAtt" => {
                        out.insert(inner[0].as_str().unwrap_or_default().to_owned());
                    }
                    "Fn::Sub" => {
                        let text = inner.as_str().or_else(|| inner[0].as_str()).unwrap_or_default();
                        for name in text.split("${").skip(1).filter_map(|s| s.split('}').next()) {
                            out.insert(name.split('.').next().unwrap().to_owned());
                        }
                        references(&inner[1], out);
                    }
                    _ => references(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

/// The template with `Fn::If` on `IsFifo` resolved.
pub(crate) fn resolve(v: &Value, fifo: bool) -> Option<Value> {
    resolve_condition(v, "IsFifo", fifo)
}

/// `v` with each `Fn::If` on `condition` resolved as `holds` says, `AWS::NoValue` left out.
pub(crate) fn resolve_condition(v: &Value, condition: &str, holds: bool) -> Option<Value> {
    let resolve = |v: &Value| resolve_condition(v, condition, holds);
    match v {
        Value::Object(o) => {
            if let Some(args) = o.get("Fn::If").and_then(Value::as_array).filter(|a| a[0] == condition) {
                return resolve(&args[if holds { 1 } else { 2 }]);
            }
            if o.get("Ref") == Some(&json!("AWS::NoValue")) {
                return None;
            }
            Some(Value::Object(o.iter().filter_map(|(k, v)| Some((k.clone(), resolve(v)?))).collect()))
        }
        Value::Array(items) => Some(Value::Array(items.iter().filter_map(resolve).collect())),
        other => Some(other.clone()),
    }
}

/// The deployed name of a function: `AWS_LAMBDA_FUNCTION_NAME` at run time, the EMF `Function`
/// dimension.
pub(crate) fn function_name(t: &Value, function: &str) -> Value {
    let name = t["Resources"][function]["Properties"]["FunctionName"].clone();
    assert!(name.is_object(), "{function} has an explicit FunctionName");
    name
}

/// The string of a `{"Fn::Sub": "..."}` value (a function's name).
pub(crate) fn sub_string(v: &Value) -> &str {
    v["Fn::Sub"].as_str().expect("a Fn::Sub string")
}
