//! `Serialize` and `Deserialize` for [`Id`] (feature `serde`).
//!
//! An [`Id`] serializes as a plain number: at most 2<sup>53</sup> − 1, so a
//! browser's `JSON.parse` reads it exactly. Clients that insist on strings
//! (some JSON tooling treats every large number as suspect) get one from the
//! [`string`] adapter:
//!
//! ```
//! use idutil::Id;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Order {
//!     id: Id,
//!     #[serde(with = "idutil::serde::string")]
//!     customer: Id,
//! }
//!
//! let order = Order { id: "1452736581206048".parse()?, customer: Id::MAX };
//! let json = serde_json::to_string(&order).unwrap();
//! assert_eq!(json, r#"{"id":1452736581206048,"customer":"9007199254740991"}"#);
//! # Ok::<(), idutil::Error>(())
//! ```
//!
//! Deserializing, from either side, accepts both forms, a number or a
//! string of decimal digits, because the two kinds of client meet at the
//! same endpoints. Everything else is rejected with a message that says
//! why: negative numbers, numbers above 2<sup>53</sup> − 1, numbers with a
//! fraction or an exponent (`1.5`, `1e3`, even `2.0`: above 2<sup>52</sup>
//! a float cannot tell `…991.4` from `…991`), strings with signs, spaces or
//! other characters, and other types.
//!
//! ```
//! use idutil::Id;
//!
//! let id: Id = serde_json::from_str("1452736581206048").unwrap();
//! assert_eq!(id, serde_json::from_str::<Id>(r#""1452736581206048""#).unwrap());
//!
//! let err = serde_json::from_str::<Id>("-1").unwrap_err();
//! assert!(err.to_string().contains("negative"), "{err}");
//! let err = serde_json::from_str::<Id>("9007199254740992").unwrap_err();
//! assert!(err.to_string().contains("above 2^53 - 1"), "{err}");
//! let err = serde_json::from_str::<Id>("1.5").unwrap_err();
//! assert!(err.to_string().contains("fraction or an exponent"), "{err}");
//! ```
//!
//! In formats that are not human-readable (bincode, postcard, ...), an
//! [`Id`] is a `u64` and the [`string`] adapter writes a string; each reads
//! back what it wrote.
//!
//! An `i64` from [`idutil::IdUtil::next_id`](https://docs.rs/idutil/latest/idutil/struct.IdUtil.html#method.next_id) needs none of
//! this: serde writes it as the same JSON number. Convert it with
//! `Id::try_from(i64)` where the typed value, its parts or the string form
//! are wanted.

use std::fmt;

use ::serde::de::{self, Deserializer, Visitor};
use ::serde::ser::Serializer;
use ::serde::{Deserialize, Serialize};

use crate::error::IdError;
use crate::id::Id;
use crate::id::ABOVE_MAX;

/// Writes the ID as a number (`u64`).
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.as_u64())
    }
}

/// Reads a number or a string of decimal digits; see the [module
/// docs](self) for what is rejected.
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(IdVisitor)
        } else {
            deserializer.deserialize_u64(IdVisitor)
        }
    }
}

/// Accepts every shape an ID may arrive in and checks the range.
struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "an ID: an integer from 0 to 9007199254740991 (2^53 - 1), \
             as a number or a string of decimal digits",
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
        Id::try_from(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
        Id::try_from(v).map_err(E::custom)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Id, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(IdError::invalid(v.to_string(), ABOVE_MAX))),
        }
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Id, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) if v < 0 => Err(E::custom(IdError::invalid(v.to_string(), "negative"))),
            Err(_) => Err(E::custom(IdError::invalid(v.to_string(), ABOVE_MAX))),
        }
    }

    /// JSON numbers with a fraction or an exponent, and integers too large
    /// for `u64`, arrive here. None of them is an ID: a float that happens to
    /// be whole may have been rounded on the way (`9007199254740991.4` reads
    /// as `9007199254740991.0`).
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
        // `{v:?}` and not the input text, which serde does not pass on: the
        // message shows the value as read, e.g. `1e3` as `1000.0`.
        Err(if v < 0.0 {
            E::custom(format_args!("invalid ID: negative number {v:?}"))
        } else if v > Id::MAX.as_u64() as f64 {
            E::custom(format_args!("invalid ID: the number {v:?} is {ABOVE_MAX}"))
        } else {
            E::custom(format_args!(
                "invalid ID: {v:?} is {NOT_INTEGER}; IDs are plain integers"
            ))
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Id, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(v), &self)),
        }
    }
}

const NOT_INTEGER: &str = "a number with a fraction or an exponent";

/// Writes an [`Id`] as a string of decimal digits, for
/// `#[serde(with = "idutil::serde::string")]`; reads a string or a number.
///
/// ```
/// use idutil::Id;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct User {
///     #[serde(with = "idutil::serde::string")]
///     id: Id,
///     #[serde(with = "idutil::serde::string::option", default)]
///     invited_by: Option<Id>,
/// }
///
/// let user = User { id: Id::MAX, invited_by: None };
/// let json = serde_json::to_string(&user).unwrap();
/// assert_eq!(json, r#"{"id":"9007199254740991","invited_by":null}"#);
///
/// // Numbers are accepted too, so either kind of client can send it.
/// let back: User = serde_json::from_str(r#"{"id":9007199254740991}"#).unwrap();
/// assert_eq!(back, user);
/// ```
///
/// Schema generators cannot see through `serde(with)`; tell them with
/// `string::json_schema` (feature `schemars`) or `string::openapi_schema`
/// (feature `utoipa`; `string::openapi_schema_utoipa5` with `utoipa-5`): a
/// string matching [`string::PATTERN`], which admits exactly the canonical
/// decimal forms of 0 to 9007199254740991. TypeScript generators neither:
/// with ts-rs (feature `ts-rs`), write `#[ts(as = "String")]` (for
/// [`string::option`], `#[ts(as = "Option<String>")]`) beside the
/// `serde(with)`, which ts-rs requires anyway:
///
/// ```
/// # #[cfg(feature = "ts-rs")] {
/// use idutil::Id;
/// use ts_rs::TS;
///
/// #[derive(serde::Serialize, TS)]
/// struct User {
///     id: Id,
///     #[serde(with = "idutil::serde::string")]
///     #[ts(as = "String")]
///     handle: Id,
///     #[serde(with = "idutil::serde::string::option")]
///     #[ts(as = "Option<String>")]
///     invited_by: Option<Id>,
/// }
///
/// let cfg = ts_rs::Config::new();
/// assert_eq!(
///     User::decl(&cfg),
///     "type User = { id: Id, handle: string, invited_by: string | null, };"
/// );
/// # }
/// ```
pub mod string {
    use super::{Deserializer, Id, IdVisitor, Serializer};

    /// The `pattern` of the string schemas: exactly the canonical decimal
    /// forms (no sign, no leading zero) of the numbers from 0 to
    /// 2<sup>53</sup> − 1 = 9007199254740991, so a client that validates
    /// against the schema never sends a string the server refuses.
    ///
    /// ```
    /// let pattern = regex::Regex::new(idutil::serde::string::PATTERN).unwrap();
    /// assert!(pattern.is_match("9007199254740991"));
    /// assert!(!pattern.is_match("9007199254740992")); // 2^53
    /// assert!(!pattern.is_match("01"));
    /// ```
    pub const PATTERN: &str = crate::external::STRING_PATTERN;

    /// The JSON Schema of an ID written by this adapter: a string of
    /// decimal digits, `{"type": "string", "pattern": PATTERN}` with
    /// [`PATTERN`].
    ///
    /// ```
    /// use idutil::Id;
    ///
    /// #[derive(serde::Serialize, schemars::JsonSchema)]
    /// struct User {
    ///     #[serde(with = "idutil::serde::string")]
    ///     #[schemars(schema_with = "idutil::serde::string::json_schema")]
    ///     id: Id,
    /// }
    ///
    /// let schema = schemars::schema_for!(User);
    /// assert_eq!(schema.as_value()["properties"]["id"]["pattern"], idutil::serde::string::PATTERN);
    /// ```
    #[cfg(feature = "schemars")]
    #[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
    pub fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::external::schemars_support::string_schema(false)
    }

    /// The OpenAPI schema of an ID written by this adapter: a string of
    /// decimal digits, pattern [`PATTERN`].
    ///
    /// ```
    /// use idutil::Id;
    ///
    /// #[derive(serde::Serialize, utoipa::ToSchema)]
    /// struct User {
    ///     #[serde(with = "idutil::serde::string")]
    ///     #[schema(schema_with = idutil::serde::string::openapi_schema)]
    ///     id: Id,
    /// }
    /// ```
    #[cfg(feature = "utoipa")]
    #[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
    pub fn openapi_schema() -> utoipa::openapi::schema::Schema {
        crate::external::utoipa_support::v6::string_schema(false)
    }

    /// The same for utoipa 5: `#[schema(schema_with =
    /// idutil::serde::string::openapi_schema_utoipa5)]`.
    #[cfg(feature = "utoipa-5")]
    #[cfg_attr(docsrs, doc(cfg(feature = "utoipa-5")))]
    pub fn openapi_schema_utoipa5() -> utoipa5::openapi::schema::Schema {
        crate::external::utoipa_support::v5::string_schema(false)
    }

    /// Serializes `id` as a string of decimal digits.
    ///
    /// # Errors
    ///
    /// Only those of the serializer.
    pub fn serialize<S: Serializer>(id: &Id, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(id)
    }

    /// Deserializes an [`Id`] from a string of decimal digits or, in
    /// human-readable formats, a number.
    ///
    /// # Errors
    ///
    /// The value is negative, above 2<sup>53</sup> − 1, not an integer, or
    /// not a number or a string (see the [module docs](super)).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(IdVisitor)
        } else {
            deserializer.deserialize_str(IdVisitor)
        }
    }

    /// The same for `Option<Id>`: `None` is `null`.
    ///
    /// Combine it with `#[serde(default)]` to let the field be left out.
    /// Its schemas, `option::json_schema` and `option::openapi_schema`
    /// (`option::openapi_schema_utoipa5`), also allow `null`.
    pub mod option {
        use ::serde::de::{self, Visitor};

        use super::{Deserializer, Id, Serializer};

        /// The JSON Schema: a string matching [`PATTERN`](super::PATTERN), or `null`.
        #[cfg(feature = "schemars")]
        #[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
        pub fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            crate::external::schemars_support::string_schema(true)
        }

        /// The OpenAPI schema: a string matching [`PATTERN`](super::PATTERN), or `null`.
        #[cfg(feature = "utoipa")]
        #[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
        pub fn openapi_schema() -> utoipa::openapi::schema::Schema {
            crate::external::utoipa_support::v6::string_schema(true)
        }

        /// The same for utoipa 5.
        #[cfg(feature = "utoipa-5")]
        #[cfg_attr(docsrs, doc(cfg(feature = "utoipa-5")))]
        pub fn openapi_schema_utoipa5() -> utoipa5::openapi::schema::Schema {
            crate::external::utoipa_support::v5::string_schema(true)
        }

        /// Serializes `Some(id)` as a string of decimal digits and `None`
        /// as nothing (`null` in JSON).
        ///
        /// # Errors
        ///
        /// Only those of the serializer.
        pub fn serialize<S: Serializer>(id: &Option<Id>, serializer: S) -> Result<S::Ok, S::Error> {
            match id {
                Some(id) => serializer.serialize_some(&Str(*id)),
                None => serializer.serialize_none(),
            }
        }

        /// Deserializes `null` as `None` and anything else as
        /// [`string::deserialize`](super::deserialize) does.
        ///
        /// # Errors
        ///
        /// As [`string::deserialize`](super::deserialize).
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Id>, D::Error> {
            deserializer.deserialize_option(OptionVisitor)
        }

        struct Str(Id);

        impl ::serde::Serialize for Str {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                super::serialize(&self.0, serializer)
            }
        }

        struct OptionVisitor;

        impl<'de> Visitor<'de> for OptionVisitor {
            type Value = Option<Id>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("null or an ID")
            }

            fn visit_none<E: de::Error>(self) -> Result<Option<Id>, E> {
                Ok(None)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Option<Id>, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<Id>, D::Error> {
                super::deserialize(d).map(Some)
            }
        }
    }
}
