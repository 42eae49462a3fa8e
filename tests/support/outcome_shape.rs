//! The shape of an outcome record — every field's name and JSON type, recursively, values left
//! out — held to a file under `tests/outcome-shapes/`. A refactor of how outcomes are built must
//! leave every shape as it was; a deliberate change rewrites the file with
//! `PALISADE_UPDATE_OUTCOME_SHAPES=1` and says why in its commit.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The shape of `value`: objects keep their keys (sorted, as serde_json keeps them), strings
/// become `"string"`, numbers `"number"`, booleans `"bool"`; an array becomes the distinct
/// shapes of its elements, sorted, so a count or an order of events does not change it.
pub fn shape(value: &Value) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::Bool(_) => Value::from("bool"),
        Value::Number(_) => Value::from("number"),
        Value::String(_) => Value::from("string"),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = items.iter().map(shape).collect();
            shapes.sort_by_key(Value::to_string);
            shapes.dedup();
            Value::Array(shapes)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), shape(value)))
                .collect(),
        ),
    }
}

fn file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("tests/outcome-shapes").is_dir())
        .expect("tests/outcome-shapes in the workspace")
        .join("tests/outcome-shapes")
        .join(format!("{name}.json"))
}

/// Fails unless `outcome`'s shape is the one recorded as `name`.
pub fn assert_shape(name: &str, outcome: &Value) {
    let path = file(name);
    let got = serde_json::to_string_pretty(&shape(outcome)).expect("a shape serializes") + "\n";
    if std::env::var_os("PALISADE_UPDATE_OUTCOME_SHAPES").is_some() {
        std::fs::write(&path, &got).expect("the shape file is writable");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (PALISADE_UPDATE_OUTCOME_SHAPES=1 writes it)",
            path.display()
        )
    });
    assert!(
        got == want,
        "the outcome of `{name}` changed shape (PALISADE_UPDATE_OUTCOME_SHAPES=1 rewrites {}):\n--- want\n{want}\n--- got\n{got}\n--- outcome\n{outcome}",
        path.display()
    );
}
