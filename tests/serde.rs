//! `Serialize`/`Deserialize` for `Id` and the `idutil::serde::string`
//! adapter: exact round-trips, both input forms, and every kind of rejection
//! with a message that says why.
#![cfg(feature = "serde")]

use idutil::Id;
use serde::{Deserialize, Serialize};
use serde_test::{assert_de_tokens_error, assert_tokens, Configure, Token};

const BOUNDARY: &str = "9007199254740991";

fn id(v: u64) -> Id {
    Id::from_u64(v).unwrap()
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Record {
    id: Id,
    #[serde(with = "idutil::serde::string")]
    text_id: Id,
    #[serde(with = "idutil::serde::string::option", default)]
    parent: Option<Id>,
}

#[test]
fn id_is_a_json_number() {
    assert_eq!(serde_json::to_string(&Id::MAX).unwrap(), BOUNDARY);
    assert_eq!(serde_json::to_string(&id(0)).unwrap(), "0");
    let v = serde_json::to_value(id(1_452_736_581_206_048)).unwrap();
    assert!(v.is_u64(), "{v:?} is not a JSON number");
}

#[test]
fn adapter_writes_a_string() {
    let r = Record {
        id: Id::MAX,
        text_id: Id::MAX,
        parent: Some(id(7)),
    };
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(
        json,
        r#"{"id":9007199254740991,"text_id":"9007199254740991","parent":"7"}"#
    );
    let none = Record { parent: None, ..r };
    assert!(serde_json::to_string(&none)
        .unwrap()
        .ends_with(r#","parent":null}"#));
}

#[test]
fn round_trips_exactly_in_both_forms() {
    let samples = [
        0,
        1,
        31,
        1_452_736_581_206_048,
        (1 << 52) + 1, // above 2^52 a float has no room for a fraction
        (1 << 53) - 2,
        (1 << 53) - 1,
    ];
    for v in samples {
        let r = Record {
            id: id(v),
            text_id: id(v),
            parent: Some(id(v)),
        };
        let json = serde_json::to_string(&r).unwrap();
        let back: Record = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r, "{json}");
        // The text is exactly the decimal digits, in both forms.
        assert!(json.contains(&format!(":{v},")), "{json}");
        assert!(json.contains(&format!(":\"{v}\"")), "{json}");
        // Through serde_json::Value as well (it keeps integers as integers).
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::from_value::<Record>(value).unwrap(), r);
    }
}

#[test]
fn both_sides_accept_numbers_and_strings() {
    for text in [BOUNDARY, "\"9007199254740991\""] {
        assert_eq!(serde_json::from_str::<Id>(text).unwrap(), Id::MAX, "{text}");
    }
    let r: Record = serde_json::from_str(r#"{"id":"5","text_id":6,"parent":"7"}"#).unwrap();
    assert_eq!((r.id, r.text_id, r.parent), (id(5), id(6), Some(id(7))));
    let r: Record = serde_json::from_str(r#"{"id":5,"text_id":"6"}"#).unwrap();
    assert_eq!(r.parent, None, "a missing optional field is None");
}

/// Each bad JSON value, and a fragment the error message must contain.
const REJECTED: &[(&str, &str)] = &[
    ("-1", "negative"),
    ("-9007199254740991", "negative"),
    ("-99999999999999999999", "negative"),
    ("\"-1\"", "negative"),
    // One text per ID, the one it prints: the string schema's pattern too.
    ("\"0007\"", "leading zero"),
    ("9007199254740992", "above 2^53 - 1"),
    ("18446744073709551615", "above 2^53 - 1"),
    ("18446744073709551616", "above 2^53 - 1"),
    ("1e300", "above 2^53 - 1"),
    ("\"9007199254740992\"", "above 2^53 - 1"),
    ("\"99999999999999999999999\"", "above 2^53 - 1"),
    ("1.5", "fraction or an exponent"),
    ("2.0", "fraction or an exponent"),
    ("1e3", "fraction or an exponent"),
    ("9007199254740990.5", "fraction or an exponent"),
    ("-0.0", "fraction or an exponent"),
    ("\"1.5\"", "not a decimal integer"),
    ("\"\"", "empty"),
    ("\" 7\"", "not a decimal integer"),
    ("\"+7\"", "not a decimal integer"),
    ("\"0x1f\"", "not a decimal integer"),
    ("\"abc\"", "not a decimal integer"),
    ("true", "expected an ID"),
    ("null", "expected an ID"),
    ("[1]", "expected an ID"),
    ("{\"id\":1}", "expected an ID"),
];

#[test]
fn rejections_say_why() {
    for &(json, why) in REJECTED {
        let plain = serde_json::from_str::<Id>(json)
            .expect_err(json)
            .to_string();
        assert!(plain.contains(why), "{json}: {plain:?} lacks {why:?}");
        // The adapter reads with the same rules.
        let doc = format!(r#"{{"id":1,"text_id":{json}}}"#);
        let adapted = serde_json::from_str::<Record>(&doc)
            .expect_err(&doc)
            .to_string();
        assert!(adapted.contains(why), "{doc}: {adapted:?} lacks {why:?}");
        // And so does a value that went through serde_json::Value first.
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(json) {
            let e = serde_json::from_value::<Id>(value)
                .expect_err(json)
                .to_string();
            assert!(e.contains(why), "{json} via Value: {e:?} lacks {why:?}");
        }
    }
}

#[test]
fn rejected_input_is_quoted_in_the_message() {
    let e = serde_json::from_str::<Id>("9007199254740992")
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"9007199254740992\""), "{e}");
    assert!(
        e.contains("line 1 column"),
        "serde_json adds the position: {e}"
    );
}

#[test]
fn tokens_human_readable() {
    assert_tokens(&id(42).readable(), &[Token::U64(42)]);
    let r = Record {
        id: id(1),
        text_id: id(2),
        parent: None,
    };
    assert_tokens(
        &r.readable(),
        &[
            Token::Struct {
                name: "Record",
                len: 3,
            },
            Token::Str("id"),
            Token::U64(1),
            Token::Str("text_id"),
            Token::Str("2"),
            Token::Str("parent"),
            Token::None,
            Token::StructEnd,
        ],
    );
    assert_de_tokens_error::<serde_test::Readable<Id>>(
        &[Token::I8(-3)],
        "invalid ID \"-3\": negative",
    );
    assert_de_tokens_error::<serde_test::Readable<Id>>(
        &[Token::F64(1.5)],
        "invalid ID: 1.5 is a number with a fraction or an exponent; IDs are plain integers",
    );
    assert_de_tokens_error::<serde_test::Readable<Id>>(
        &[Token::Bool(true)],
        "invalid type: boolean `true`, expected an ID: an integer from 0 to \
         9007199254740991 (2^53 - 1), as a number or a string of decimal digits",
    );
}

#[test]
fn wide_integers_are_checked_too() {
    use serde::de::value::{Error, I128Deserializer, U128Deserializer};
    use serde::de::IntoDeserializer;

    let ok = Id::deserialize(U128Deserializer::<Error>::new(42)).unwrap();
    assert_eq!(ok, id(42));
    let e = Id::deserialize(U128Deserializer::<Error>::new(1 << 64)).unwrap_err();
    assert!(e.to_string().contains("above 2^53 - 1"), "{e}");
    let e = Id::deserialize(I128Deserializer::<Error>::new(-(1 << 64))).unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
    let e = Id::deserialize(IntoDeserializer::<Error>::into_deserializer(-1i32)).unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
}

#[test]
fn tokens_compact() {
    // Formats that are not self-describing ask for exactly what was written.
    assert_tokens(&Id::MAX.compact(), &[Token::U64((1 << 53) - 1)]);
    assert_de_tokens_error::<serde_test::Compact<Id>>(
        &[Token::U64(1 << 53)],
        "invalid ID \"9007199254740992\": above 2^53 - 1 (9007199254740991)",
    );
    let r = Record {
        id: id(1),
        text_id: id(2),
        parent: Some(id(3)),
    };
    assert_tokens(
        &r.compact(),
        &[
            Token::Struct {
                name: "Record",
                len: 3,
            },
            Token::Str("id"),
            Token::U64(1),
            Token::Str("text_id"),
            Token::Str("2"),
            Token::Str("parent"),
            Token::Some,
            Token::Str("3"),
            Token::StructEnd,
        ],
    );
}
