//! The schemas that schemars (JSON Schema) and utoipa 6 and 5 (OpenAPI)
//! emit for `Id` and for the string adapter, compared as JSON values.

#![cfg(all(
    feature = "serde",
    any(feature = "schemars", feature = "utoipa", feature = "utoipa-5")
))]

use serde_json::{json, Value};

fn id_schema() -> Value {
    json!({
        "type": "integer",
        "format": "int64",
        "minimum": 0,
        "maximum": 9_007_199_254_740_991u64,
    })
}

fn string_schema() -> Value {
    json!({ "type": "string", "pattern": idutil::serde::string::PATTERN })
}

#[cfg(feature = "schemars")]
pub mod json_schema {
    use super::*;
    use idutil::Id;
    use schemars::JsonSchema;

    // Public, as a user's type would be: only its schema is used here.
    #[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
    pub struct Order {
        id: Id,
        parent: Option<Id>,
        #[serde(with = "idutil::serde::string")]
        #[schemars(schema_with = "idutil::serde::string::json_schema")]
        customer: Id,
        #[serde(with = "idutil::serde::string::option", default)]
        #[schemars(schema_with = "idutil::serde::string::option::json_schema")]
        coupon: Option<Id>,
        items: Vec<Id>,
    }

    #[test]
    fn id_is_an_int64_integer_up_to_2_pow_53_minus_1() {
        let mut schema = schemars::schema_for!(Id).to_value();
        let object = schema.as_object_mut().unwrap();
        assert!(object.remove("$schema").is_some());
        assert_eq!(object.remove("title"), Some(json!("Id")));
        assert_eq!(schema, id_schema());
    }

    #[test]
    fn fields_inline_the_integer_and_the_adapter_a_digit_string() {
        let schema = schemars::schema_for!(Order).to_value();
        let p = &schema["properties"];
        assert_eq!(p["id"], id_schema());
        let mut nullable = id_schema();
        nullable["type"] = json!(["integer", "null"]);
        assert_eq!(p["parent"], nullable);
        assert_eq!(p["customer"], string_schema());
        // `default` is serde's `#[serde(default)]`, which schemars reports.
        assert_eq!(
            p["coupon"],
            json!({ "type": ["string", "null"], "pattern": idutil::serde::string::PATTERN, "default": null })
        );
        assert_eq!(p["items"], json!({ "type": "array", "items": id_schema() }));
        assert_eq!(schema["required"], json!(["id", "customer", "items"]));
        assert!(
            schema.get("$defs").is_none(),
            "an Id is inlined, like other integers: {schema}"
        );
    }

    /// The schema says what serde writes and accepts.
    #[test]
    fn what_serde_writes_matches_the_schema() {
        let pattern = regex::Regex::new(idutil::serde::string::PATTERN).unwrap();
        // ... and nothing serde refuses: not 2^53, not a leading zero.
        for refused in ["9007199254740992", "9999999999999999", "01", "+1", ""] {
            assert!(!pattern.is_match(refused), "{refused:?}");
            assert!(serde_json::from_value::<Order>(json!({
                "id": 1, "customer": refused, "items": []
            }))
            .is_err());
        }
        for id in [Id::MIN, Id::MAX, "1452736581206048".parse().unwrap()] {
            let order = Order {
                id,
                parent: Some(id),
                customer: id,
                coupon: Some(id),
                items: vec![id],
            };
            let value = serde_json::to_value(&order).unwrap();
            let n = value["id"].as_u64().expect("an integer");
            assert!(n <= 9_007_199_254_740_991);
            let s = value["customer"].as_str().expect("a string");
            assert!(pattern.is_match(s), "{s}");
            assert!(pattern.is_match(value["coupon"].as_str().unwrap()));
        }
    }
}

#[cfg(feature = "utoipa")]
pub mod openapi {
    use super::*;
    use idutil::Id;
    use utoipa::{OpenApi, PartialSchema, ToSchema};

    // Public, as a user's type would be: only its schema is used here.
    #[derive(serde::Serialize, ToSchema)]
    pub struct Order {
        id: Id,
        #[serde(with = "idutil::serde::string")]
        #[schema(schema_with = idutil::serde::string::openapi_schema)]
        customer: Id,
        #[serde(with = "idutil::serde::string::option")]
        #[schema(schema_with = idutil::serde::string::option::openapi_schema)]
        coupon: Option<Id>,
    }

    #[derive(OpenApi)]
    #[openapi(components(schemas(Order)))]
    struct Api;

    #[test]
    fn id_is_an_int64_integer_up_to_2_pow_53_minus_1() {
        let schema = serde_json::to_value(Id::schema()).unwrap();
        assert_eq!(schema, id_schema());
        assert_eq!(Id::name(), "Id");
    }

    #[test]
    fn a_document_names_id_and_the_adapter_is_a_digit_string() {
        let doc = serde_json::to_value(Api::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["Id"], id_schema(), "{doc:#}");
        let p = &schemas["Order"]["properties"];
        assert_eq!(p["id"], json!({ "$ref": "#/components/schemas/Id" }));
        assert_eq!(p["customer"], string_schema());
        assert_eq!(
            p["coupon"],
            json!({ "type": ["string", "null"], "pattern": idutil::serde::string::PATTERN })
        );
    }
}

/// utoipa 5 (feature `utoipa-5`) gives the same schemas as utoipa 6.
#[cfg(feature = "utoipa-5")]
pub mod openapi_5 {
    use super::*;
    use idutil::Id;
    use utoipa5::{PartialSchema, ToSchema};

    #[test]
    fn id_and_the_adapter_are_those_of_utoipa_6() {
        assert_eq!(serde_json::to_value(Id::schema()).unwrap(), id_schema());
        assert_eq!(<Id as ToSchema>::name(), "Id");
        let string = idutil::serde::string::openapi_schema_utoipa5();
        assert_eq!(serde_json::to_value(string).unwrap(), string_schema());
        let option = idutil::serde::string::option::openapi_schema_utoipa5();
        assert_eq!(
            serde_json::to_value(option).unwrap(),
            json!({ "type": ["string", "null"], "pattern": idutil::serde::string::PATTERN })
        );
    }
}
