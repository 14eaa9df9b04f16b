//! OpenAPI schema for `Id` (feature `utoipa`).

use std::borrow::Cow;

use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::Id;

/// An integer, format `int64`, from 0 to 9007199254740991
/// (2<sup>53</sup> − 1).
///
/// For a field written with [`idutil::serde::string`](crate::serde::string),
/// add `#[schema(schema_with = idutil::serde::string::openapi_schema)]`.
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
impl PartialSchema for Id {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0u64))
            .maximum(Some(Id::MAX.as_u64()))
            .into()
    }
}

/// Named `Id` in `components/schemas`.
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
impl ToSchema for Id {
    fn name() -> Cow<'static, str> {
        "Id".into()
    }
}

/// The schema of the string form, `null` allowed or not.
#[cfg(feature = "serde")]
pub(crate) fn string_schema(nullable: bool) -> Schema {
    let ty = if nullable {
        [Type::String, Type::Null].into_iter().collect()
    } else {
        Type::String.into()
    };
    ObjectBuilder::new()
        .schema_type::<utoipa::openapi::schema::SchemaType>(ty)
        .pattern(Some(crate::external::STRING_PATTERN))
        .into()
}
