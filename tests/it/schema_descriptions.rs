//! Every part of the schema a client can see is described: front-end developers read the schema
//! (GraphiQL's docs pane, generated client types) rather than the server's code. The schema is
//! walked through introspection, as those tools walk it, so a description the SDL shows but
//! introspection does not (or the other way round) is caught too.

use serde_json::Value;

/// Scalars the GraphQL specification defines; their meaning is the specification's.
const BUILT_IN_SCALARS: &[&str] = &["String", "Int", "Float", "Boolean", "ID"];

const RFC_3339: &str = "https://datatracker.ietf.org/doc/html/rfc3339";

const INTROSPECTION: &str = r#"
{
  __schema {
    types {
      name
      kind
      description
      specifiedByURL
      fields(includeDeprecated: true) { name description args { name description } }
      inputFields { name description }
      enumValues(includeDeprecated: true) { name description }
    }
  }
}
"#;

/// The `types` of the in-process schema's introspection (no database is needed to introspect).
async fn introspected_types() -> Vec<Value> {
    let schema = course_forum::testing::graphql::schema_builder().finish();
    let response = schema.execute(INTROSPECTION).await;
    assert!(response.errors.is_empty(), "introspection failed: {:?}", response.errors);
    let data = response.data.into_json().expect("introspection data is JSON");
    data["__schema"]["types"].as_array().cloned().expect("__schema.types is a list")
}

fn described(item: &Value) -> bool {
    item["description"].as_str().is_some_and(|d| !d.trim().is_empty())
}

fn name(item: &Value) -> &str {
    item["name"].as_str().unwrap_or("<unnamed>")
}

fn list<'a>(item: &'a Value, key: &str) -> &'a [Value] {
    item[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

#[tokio::test]
async fn every_type_field_argument_and_enum_value_has_a_description() {
    let types = introspected_types().await;
    let mut missing = Vec::new();
    for ty in &types {
        let type_name = name(ty);
        if type_name.starts_with("__") || BUILT_IN_SCALARS.contains(&type_name) {
            continue;
        }
        if !described(ty) {
            missing.push(format!("type {type_name}"));
        }
        for field in list(ty, "fields") {
            let field_name = name(field);
            if !described(field) {
                missing.push(format!("field {type_name}.{field_name}"));
            }
            for arg in list(field, "args") {
                if !described(arg) {
                    missing.push(format!("argument {type_name}.{field_name}({})", name(arg)));
                }
            }
        }
        for field in list(ty, "inputFields") {
            if !described(field) {
                missing.push(format!("input field {type_name}.{}", name(field)));
            }
        }
        for value in list(ty, "enumValues") {
            if !described(value) {
                missing.push(format!("enum value {type_name}.{}", name(value)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} parts of the schema have no description:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

#[tokio::test]
async fn datetime_is_described_and_specified_by_rfc_3339() {
    let types = introspected_types().await;
    let datetime = types.iter().find(|ty| name(ty) == "DateTime").expect("the schema has a DateTime scalar");
    assert_eq!(datetime["kind"], "SCALAR");
    assert_eq!(datetime["specifiedByURL"].as_str(), Some(RFC_3339), "DateTime's specifiedByURL");
    let description = datetime["description"].as_str().unwrap_or_default();
    // The library's own text ("Implement the DateTime<Utc> scalar") is written for Rust code.
    assert!(
        description.contains("RFC 3339") && !description.contains("Implement"),
        "DateTime's description is not the client-facing one: {description:?}"
    );
}

#[test]
fn the_exported_sdl_carries_specified_by() {
    let sdl = course_forum::testing::graphql::sdl();
    assert!(
        sdl.contains(&format!("scalar DateTime @specifiedBy(url: \"{RFC_3339}\")")),
        "schema.graphql should show DateTime's @specifiedBy"
    );
}
