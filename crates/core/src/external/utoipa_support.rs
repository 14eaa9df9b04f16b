//! OpenAPI schema for `Id` (feature `utoipa` for utoipa 6, `utoipa-5` for
//! utoipa 5).
//!
//! The two majors build a schema the same way, so the impls are written
//! once, in `utoipa_impls!`, and instantiated for each.

/// `PartialSchema` and `ToSchema` for the utoipa crate `$utoipa` (under
/// feature `$feature`), and `$module::string_schema`, the schema of the
/// string form.
macro_rules! utoipa_impls {
    ($utoipa:ident, $feature:literal, $module:ident) => {
        /// An integer, format `int64`, from 0 to 9007199254740991
        /// (2<sup>53</sup> − 1).
        ///
        /// For a field written with [`idutil::serde::string`](crate::serde::string),
        /// add `#[schema(schema_with = idutil::serde::string::openapi_schema)]`
        /// (utoipa 6; `openapi_schema_utoipa5` for utoipa 5).
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl $utoipa::PartialSchema for crate::Id {
            fn schema() -> $utoipa::openapi::RefOr<$utoipa::openapi::schema::Schema> {
                use $utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(0u64))
                    .maximum(Some(crate::Id::MAX.as_u64()))
                    .into()
            }
        }

        /// Named `Id` in `components/schemas`.
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl $utoipa::ToSchema for crate::Id {
            fn name() -> std::borrow::Cow<'static, str> {
                "Id".into()
            }
        }

        #[cfg(feature = "serde")]
        pub(crate) mod $module {
            use $utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};

            /// The schema of the string form, `null` allowed or not.
            pub(crate) fn string_schema(nullable: bool) -> Schema {
                let ty: SchemaType = if nullable {
                    [Type::String, Type::Null].into_iter().collect()
                } else {
                    Type::String.into()
                };
                ObjectBuilder::new()
                    .schema_type(ty)
                    .pattern(Some(crate::external::STRING_PATTERN))
                    .into()
            }
        }
    };
}

#[cfg(feature = "utoipa")]
utoipa_impls!(utoipa, "utoipa", v6);

#[cfg(feature = "utoipa-5")]
utoipa_impls!(utoipa5, "utoipa-5", v5);
