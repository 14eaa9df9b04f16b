//! The TypeScript type of `Id` (feature `ts-rs`).
//!
//! ts-rs writes a Rust `i64` as `bigint`, which `JSON.parse` never
//! produces; an ID is a plain JSON number, exact in JavaScript, so it is
//! `number`, under its own name so that editors show what it holds.

use std::path::PathBuf;

use ts_rs::{Config, TS};

use crate::Id;

/// The declaration's doc comment, as ts-rs writes one.
const DOCS: &str = "/**\n \
    * A unique, time-ordered ID: an integer from 0 to 2^53 − 1 \
    (9007199254740991, `Number.MAX_SAFE_INTEGER`), so a JSON number holds it exactly.\n \
    */\n";

/// `Id`, declared as `number` in `Id.ts` with a doc comment saying it is at
/// most 2<sup>53</sup> − 1; a struct's `Id` field names it and imports it:
///
/// ```
/// use idutil::Id;
/// use ts_rs::TS;
///
/// #[derive(TS)]
/// struct Record {
///     id: Id,
///     parent: Option<Id>,
///     text: String,
/// }
///
/// let cfg = ts_rs::Config::new();
/// assert_eq!(Id::decl(&cfg), "type Id = number;");
/// assert_eq!(Record::decl(&cfg), "type Record = { id: Id, parent: Id | null, text: string, };");
/// let file = Record::export_to_string(&cfg).unwrap();
/// assert!(file.contains(r#"import type { Id } from "./Id";"#), "{file}");
/// ```
///
/// A field written as a string with
/// [`idutil::serde::string`](crate::serde::string) needs `#[ts(as =
/// "String")]` beside its `serde(with)`, as that module shows.
#[cfg_attr(docsrs, doc(cfg(feature = "ts-rs")))]
impl TS for Id {
    type WithoutGenerics = Id;
    type OptionInnerType = Id;

    fn docs() -> Option<String> {
        Some(DOCS.to_owned())
    }

    fn ident(_: &Config) -> String {
        "Id".to_owned()
    }

    fn name(_: &Config) -> String {
        "Id".to_owned()
    }

    fn inline(_: &Config) -> String {
        "number".to_owned()
    }

    fn decl(cfg: &Config) -> String {
        format!("type Id = {};", Id::inline(cfg))
    }

    fn decl_concrete(cfg: &Config) -> String {
        Id::decl(cfg)
    }

    fn output_path() -> Option<PathBuf> {
        Some(PathBuf::from("Id.ts"))
    }
}
