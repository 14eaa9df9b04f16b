//! The TypeScript a front end gets from ts-rs (feature `ts-rs`): a struct
//! holding `Id`s exports them as `Id`, declared in its own file as `number`
//! with a doc comment saying it is at most 2^53 − 1 (an `i64` would be
//! `bigint`, which `JSON.parse` never produces), and the string adapter's
//! fields, with the one attribute ts-rs requires beside `serde(with)`, as
//! `string`.

#![cfg(all(feature = "ts-rs", feature = "serde"))]

use std::fs;

use idutil::Id;
use serde::Serialize;
use ts_rs::{Config, TS};

#[derive(Serialize, TS)]
struct Order {
    id: Id,
    parent: Option<Id>,
    lines: Vec<Id>,
    #[serde(with = "idutil::serde::string")]
    #[ts(as = "String")]
    customer: Id,
    #[serde(with = "idutil::serde::string::option", default)]
    #[ts(as = "Option<String>")]
    invited_by: Option<Id>,
    // Not an ID: what ts-rs makes of an `i64`, for contrast.
    count: i64,
}

#[test]
fn an_id_is_a_number_and_the_string_form_a_string() {
    let cfg = Config::new();
    assert_eq!(Id::inline(&cfg), "number");
    assert_eq!(Id::decl(&cfg), "type Id = number;");
    assert_eq!(
        Order::decl(&cfg),
        "type Order = { id: Id, parent: Id | null, lines: Array<Id>, customer: string, \
         invited_by: string | null, count: bigint, };"
    );
}

#[test]
fn exporting_a_struct_writes_the_id_type_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::new().with_out_dir(dir.path());
    Order::export_all(&cfg).unwrap();

    let order = fs::read_to_string(dir.path().join("Order.ts")).unwrap();
    assert!(
        order.contains(r#"import type { Id } from "./Id";"#),
        "{order}"
    );
    let id = fs::read_to_string(dir.path().join("Id.ts")).unwrap();
    assert!(id.ends_with("export type Id = number;\n"), "{id}");
    let doc = id.split("/**").nth(1).unwrap().split("*/").next().unwrap();
    assert!(
        doc.contains("2^53 − 1") && doc.contains("9007199254740991"),
        "{id}"
    );

    // What the front end receives matches: numbers where the type says
    // `number`, strings where it says `string`.
    let json = serde_json::to_value(Order {
        id: Id::MAX,
        parent: None,
        lines: vec![Id::MIN],
        customer: Id::MAX,
        invited_by: Some(Id::MIN),
        count: 1,
    })
    .unwrap();
    assert!(json["id"].is_u64() && json["lines"][0].is_u64());
    assert!(json["parent"].is_null());
    assert_eq!(json["customer"], "9007199254740991");
    assert_eq!(json["invited_by"], "0");
}
