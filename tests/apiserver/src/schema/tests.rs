use serde_json::json;

use super::*;

fn widget_schema() -> Schema {
    Schema::compile(&json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "replicas": {"type": "integer", "default": 1, "minimum": 0, "maximum": 10},
                    "size": {"type": "string", "enum": ["low", "medium", "high"]},
                    "name": {"type": "string", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$"},
                    "port": {"x-kubernetes-int-or-string": true},
                    "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1},
                    "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "note": {"type": "string", "nullable": true},
                    "when": {"type": "string", "format": "date-time"},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                              "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                 "properties": {"spec": {"type": "object"}}},
                }
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }
    }))
    .expect("compiles")
}

fn errors(obj: Value) -> Vec<String> {
    let mut obj = obj;
    widget_schema()
        .admit(&mut obj)
        .errors
        .iter()
        .map(FieldError::to_string)
        .collect()
}

#[test]
fn a_string_where_an_integer_is_declared_is_a_type_error_worded_as_the_server_words_it() {
    assert_eq!(
        errors(json!({"spec": {"size": "low", "replicas": "one"}})),
        [
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ]
    );
    // A number with no fraction is an integer; 1.5 is not.
    assert!(errors(json!({"spec": {"size": "low", "replicas": 2.0}})).is_empty());
    assert_eq!(
        errors(json!({"spec": {"size": "low", "replicas": 1.5}})),
        [
            "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
        ]
    );
}

#[test]
fn enum_required_and_bounds_are_checked() {
    assert_eq!(
        errors(json!({"spec": {"size": "urgent"}})),
        [
            "spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"medium\", \"high\""
        ]
    );
    assert_eq!(errors(json!({"spec": {}})), ["spec.size: Required value"]);
    assert_eq!(
        errors(json!({"spec": {"size": "low", "replicas": 11, "ratio": 1}})),
        [
            "spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1",
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": "low", "name": "Abcdef"}})),
        [
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"Abcdef\": spec.name in body should match '^[a-z]+$'",
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": "low", "name": "a", "tags": []}})),
        [
            "spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": "low", "tags": ["a", "b", 3]}})),
        [
            "spec.tags[2]: Invalid value: \"integer\": spec.tags[2] in body must be of type string: \"integer\"",
            "spec.tags: Too many: 3: must have at most 2 items",
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": "low", "when": "yesterday"}})),
        [
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""
        ]
    );
}

#[test]
fn int_or_string_and_nullable_take_what_they_declare() {
    assert!(errors(json!({"spec": {"size": "low", "port": 80, "note": null}})).is_empty());
    assert!(errors(json!({"spec": {"size": "low", "port": "http"}})).is_empty());
    assert_eq!(
        errors(json!({"spec": {"size": "low", "port": true}})),
        [
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": "low", "labels": {"a": 1}}})),
        [
            "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\""
        ]
    );
}

#[test]
fn unknown_fields_are_pruned_but_metadata_and_preserved_fields_stay() {
    let schema = widget_schema();
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {"size": "low", "x": 1,
                 "extra": {"free": {"any": 1}, "known": {"a": "b", "gone": 1}},
                 "tags": ["a"],
                 "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                              "spec": {"any": 1}, "other": 2}},
        "status": {"ready": true, "phase": "x"},
        "top": 1,
    });
    let admission = schema.admit(&mut obj);
    assert!(admission.errors.is_empty(), "{:?}", admission.errors);
    assert_eq!(
        admission.pruned,
        [
            "spec.extra.known.gone",
            "spec.template.other",
            "spec.template.spec.any",
            "spec.x",
            "status.phase",
            "top"
        ]
    );
    assert_eq!(obj["metadata"], json!({"name": "w", "labels": {"a": "b"}}));
    assert_eq!(obj["spec"]["extra"]["free"], json!({"any": 1}));
    assert_eq!(obj["spec"]["extra"]["known"], json!({"a": "b"}));
    assert_eq!(obj["spec"]["template"]["metadata"], json!({"name": "p"}));
    assert_eq!(obj["apiVersion"], "example.com/v1");
}

#[test]
fn defaults_fill_missing_and_null_fields_before_pruning_and_validation() {
    let schema = widget_schema();
    let mut obj = json!({"spec": {"size": "low", "replicas": null}});
    assert!(schema.admit(&mut obj).errors.is_empty());
    assert_eq!(obj["spec"]["replicas"], 1);
    // No parent is created for a default.
    let mut obj = json!({"metadata": {"name": "w"}});
    schema.default_fields(&mut obj);
    assert!(obj.get("spec").is_none());
    // A null without a default is dropped where the field is not nullable.
    let mut obj = json!({"spec": {"size": "low", "name": null, "note": null}});
    assert!(schema.admit(&mut obj).errors.is_empty());
    assert_eq!(
        obj["spec"],
        json!({"size": "low", "note": null, "replicas": 1})
    );
}

#[test]
fn a_bad_schema_is_an_error_naming_where() {
    let e = Schema::compile(
        &json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"a": {"type": "string", "pattern": "(["}}}}}),
    )
    .unwrap_err();
    assert_eq!(
        e.path,
        "openAPIV3Schema.properties[spec].properties[a].pattern"
    );
    assert!(e.problem.starts_with("invalid regex"), "{e}");
    let e = Schema::compile(&json!({"type": "thing"})).unwrap_err();
    assert_eq!(e.path, "openAPIV3Schema.type");
}

#[test]
fn crd_schemas_admit_objects_of_their_kind_and_version_only() {
    let crd = json!({"kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget"},
                 "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object",
                    "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}}}}}]}});
    let schemas = CrdSchemas::of(std::iter::once(&crd));
    let mut ok = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 1}});
    assert_eq!(schemas.admit(&mut ok), Ok(vec!["spec.x".to_string()]));
    assert_eq!(ok["spec"], json!({"n": 3}));
    let mut bad = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"n": "x"}});
    assert_eq!(
        schemas.admit(&mut bad).unwrap_err(),
        "Widget.example.com \"w\" is invalid: spec.n: Invalid value: \"string\": spec.n in body must be of type integer: \"string\""
    );
    let mut other = json!({"apiVersion": "example.com/v2", "kind": "Widget", "spec": {"n": "x"}});
    assert_eq!(schemas.admit(&mut other), Ok(vec![]));
}
