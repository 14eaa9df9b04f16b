//! Integrations with other crates, each behind the feature of the same
//! name. They add trait impls for [`Id`](crate::Id); the core does not
//! depend on them.

#[cfg(feature = "diesel")]
mod diesel_support;
#[cfg(feature = "schemars")]
pub(crate) mod schemars_support;
#[cfg(feature = "sqlx")]
mod sqlx_support;
#[cfg(feature = "utoipa")]
pub(crate) mod utoipa_support;

/// The pattern of an ID written as a string: 1 to 16 decimal digits
/// (2<sup>53</sup> − 1 has 16).
#[cfg(all(feature = "serde", any(feature = "schemars", feature = "utoipa")))]
pub(crate) const STRING_PATTERN: &str = "^[0-9]{1,16}$";
