//! The one declaration of each SQL function the broker calls. A store file opens with a
//! `sql_fns!` block that names, once, each function it calls and that function's parameters
//! as SQL names them, in SQL order, with their Rust types; the macro generates the typed call:
//! a struct with one field per bound parameter, the statement text (`SELECT queen.f($1, …)`)
//! and the parameter array in SQL order. The schema test (tests/admin/sql_signatures.rs)
//! checks every declaration against the applied schema: the function exists, its parameter
//! names and order are these, and each Rust type takes the PostgreSQL type by the driver's own
//! rule (`ToSql::accepts`), so a rename or retype on one side only fails there.
//!
//! ```text
//! sql_fns! {
//!     /// What the call does.
//!     Renew<'a> = log_renew_lease_v1(p_worker: &'a str, p_seconds: i32, p_tenant: &'a str);
//!     Claim<'a> = log_pop_claim_v1(p_pid: i64, …, p_skip_window: bool = false)
//!         select "c.r_state, c.r_until" then " c";
//! }
//! ```
//!
//! A parameter is bound (`name: Type`, passed as the next `$n`), fixed (`name: Type = true`,
//! its SQL text in the statement, as `true`, `false` or `NULL`), or computed
//! (`name: Type = ("now() - make_interval(secs => ", ")")`: the next `$n` inside that SQL
//! expression; the Rust type is checked against the placeholder's type only). Parameters the
//! declaration leaves off the end take their SQL defaults. `select "cols"` makes the statement
//! `SELECT cols FROM queen.f(…)` (without it, `SELECT queen.f(…)`); `then "text"` appends text
//! (an alias, a cast). The statement text is a compile-time constant, prepared through the
//! connection's statement cache as before: a declared call costs what a hand-written one did.

use deadpool_postgres::GenericClient;
use serde::de::DeserializeOwned;
use tokio_postgres::types::{Json, ToSql, Type};
use tokio_postgres::Row;

use crate::error::Result;
use crate::store::prepare;

/// One parameter of a declaration.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Its name in SQL (`p_worker`).
    pub name: &'static str,
    /// The Rust type, as declared.
    pub rust: &'static str,
    /// Whether the Rust type takes a PostgreSQL type (the driver's check at bind time).
    pub accepts: fn(&Type) -> bool,
    /// The placeholder number `n` of `$n` when the call binds a value for it.
    pub bound: Option<usize>,
    /// What the statement passes: `$n`, a fixed SQL value, or an expression around `$n`.
    pub sql: &'static str,
    /// The bound value is passed to the parameter as it is (not through an expression), so
    /// its Rust type must take the parameter's own type.
    pub direct: bool,
}

/// One declared SQL function, as the schema test reads it.
#[derive(Debug, Clone)]
pub struct Signature {
    /// The function's name in schema `queen`.
    pub function: &'static str,
    /// The Rust struct that calls it.
    pub call: &'static str,
    /// The source file that declares it.
    pub file: &'static str,
    /// The statement the call prepares.
    pub sql: &'static str,
    pub params: Vec<Param>,
}

/// Runs a declared statement that answers exactly one row.
pub(crate) async fn query_one(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let stmt = prepare(db, sql).await?;
    Ok(db.query_one(&stmt, params).await?)
}

/// Runs a declared statement that answers at most one row.
pub(crate) async fn query_opt(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>> {
    let stmt = prepare(db, sql).await?;
    Ok(db.query_opt(&stmt, params).await?)
}

/// Runs a declared statement and answers all its rows.
pub(crate) async fn query(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let stmt = prepare(db, sql).await?;
    Ok(db.query(&stmt, params).await?)
}

/// Runs a declared statement that answers one `jsonb` value and decodes it as `T`.
pub(crate) async fn json<T: DeserializeOwned>(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<T> {
    let Json(value): Json<T> = query_one(db, sql, params).await?.try_get(0)?;
    Ok(value)
}

/// Declares SQL functions and generates their typed calls (see the module documentation).
macro_rules! sql_fns {
    ($(
        $(#[$doc:meta])*
        $call:ident $(<$lt:lifetime>)? = $function:ident ( $($params:tt)* )
            $(select $cols:literal)? $(then $tail:literal)? ;
    )*) => {
        $(
            $crate::store::sql_fn::sql_fns!(@param
                head [$(#[$doc])* $call [$($lt)?] $function [$($cols)?] [$($tail)?]]
                fields [] args [] bind [] sig [] sep []
                ph ["$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "$10" "$11" "$12" "$13" "$14" "$15" "$16"]
                n [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17]
                rest [$($params)*]
            );
        )*

        /// The SQL functions this file declares, for the schema test.
        pub fn sql_signatures() -> Vec<$crate::store::sql_fn::Signature> {
            vec![$($call::signature()),*]
        }
    };

    // A computed parameter: the next placeholder inside an SQL expression.
    (@param head $head:tt fields [$($fields:tt)*] args [$($args:tt)*] bind [$($bind:tt)*]
        sig [$($sig:tt)*] sep [$($sep:tt)*] ph [$ph:literal $($phs:literal)*] n [$k:literal $($ns:literal)*]
        rest [$name:ident : $ty:ty = ($pre:literal, $post:literal) $(, $($rest:tt)*)?]) => {
        $crate::store::sql_fn::sql_fns!(@param head $head
            fields [$($fields)* pub $name: $ty,]
            args [$($args)* $($sep)* $pre, $ph, $post,]
            bind [$($bind)* $name]
            sig [$($sig)* $crate::store::sql_fn::Param {
                name: stringify!($name),
                rust: stringify!($ty),
                accepts: <$ty as tokio_postgres::types::ToSql>::accepts,
                bound: Some($k),
                sql: concat!($pre, $ph, $post),
                direct: false,
            },]
            sep [", ",] ph [$($phs)*] n [$($ns)*] rest [$($($rest)*)?]
        );
    };

    // A fixed parameter: its SQL text in the statement, no placeholder.
    (@param head $head:tt fields $fields:tt args [$($args:tt)*] bind $bind:tt
        sig [$($sig:tt)*] sep [$($sep:tt)*] ph $ph:tt n $n:tt
        rest [$name:ident : $ty:ty = $fixed:tt $(, $($rest:tt)*)?]) => {
        $crate::store::sql_fn::sql_fns!(@param head $head
            fields $fields
            args [$($args)* $($sep)* stringify!($fixed),]
            bind $bind
            sig [$($sig)* $crate::store::sql_fn::Param {
                name: stringify!($name),
                rust: stringify!($ty),
                accepts: <$ty as tokio_postgres::types::ToSql>::accepts,
                bound: None,
                sql: stringify!($fixed),
                direct: true,
            },]
            sep [", ",] ph $ph n $n rest [$($($rest)*)?]
        );
    };

    // A bound parameter: the next placeholder.
    (@param head $head:tt fields [$($fields:tt)*] args [$($args:tt)*] bind [$($bind:tt)*]
        sig [$($sig:tt)*] sep [$($sep:tt)*] ph [$ph:literal $($phs:literal)*] n [$k:literal $($ns:literal)*]
        rest [$name:ident : $ty:ty $(, $($rest:tt)*)?]) => {
        $crate::store::sql_fn::sql_fns!(@param head $head
            fields [$($fields)* pub $name: $ty,]
            args [$($args)* $($sep)* $ph,]
            bind [$($bind)* $name]
            sig [$($sig)* $crate::store::sql_fn::Param {
                name: stringify!($name),
                rust: stringify!($ty),
                accepts: <$ty as tokio_postgres::types::ToSql>::accepts,
                bound: Some($k),
                sql: $ph,
                direct: true,
            },]
            sep [", ",] ph [$($phs)*] n [$($ns)*] rest [$($($rest)*)?]
        );
    };

    // Every parameter read: the struct, its statement and its calls. `$count` is the first
    // placeholder number not taken, so the array holds `$count - 1` values.
    (@param head [$(#[$doc:meta])* $call:ident [$($lt:lifetime)?] $function:ident [$($cols:literal)?] [$($tail:literal)?]]
        fields [$($fields:tt)*] args [$($args:tt)*] bind [$($bind:ident)*]
        sig [$($sig:tt)*] sep $sep:tt ph $ph:tt n [$count:literal $($ns:literal)*] rest []) => {
        $(#[$doc])*
        pub struct $call $(<$lt>)? {
            $($fields)*
        }

        impl $(<$lt>)? $call $(<$lt>)? {
            /// The SQL function's name in schema `queen`.
            pub const FUNCTION: &'static str = stringify!($function);

            /// The statement this call prepares.
            pub const SQL: &'static str = concat!(
                "SELECT ",
                $($cols, " FROM ",)?
                "queen.", stringify!($function), "(",
                $($args)*
                ")"
                $(, $tail)?
            );

            /// The bound values, in placeholder order.
            pub fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); $count - 1] {
                [$(&self.$bind),*]
            }

            /// The declaration, for the schema test.
            pub fn signature() -> $crate::store::sql_fn::Signature {
                $crate::store::sql_fn::Signature {
                    function: Self::FUNCTION,
                    call: stringify!($call),
                    file: file!(),
                    sql: Self::SQL,
                    params: vec![$($sig)*],
                }
            }

            /// Runs the call; it answers exactly one row.
            pub async fn query_one(
                &self,
                db: &impl deadpool_postgres::GenericClient,
            ) -> $crate::error::Result<tokio_postgres::Row> {
                $crate::store::sql_fn::query_one(db, Self::SQL, &self.params()).await
            }

            /// Runs the call; it answers at most one row.
            pub async fn query_opt(
                &self,
                db: &impl deadpool_postgres::GenericClient,
            ) -> $crate::error::Result<Option<tokio_postgres::Row>> {
                $crate::store::sql_fn::query_opt(db, Self::SQL, &self.params()).await
            }

            /// Runs the call and answers all its rows.
            pub async fn query(
                &self,
                db: &impl deadpool_postgres::GenericClient,
            ) -> $crate::error::Result<Vec<tokio_postgres::Row>> {
                $crate::store::sql_fn::query(db, Self::SQL, &self.params()).await
            }

            /// Runs the call, whose one value is `jsonb`, decoded as `T`.
            pub async fn json<T: serde::de::DeserializeOwned>(
                &self,
                db: &impl deadpool_postgres::GenericClient,
            ) -> $crate::error::Result<T> {
                $crate::store::sql_fn::json(db, Self::SQL, &self.params()).await
            }
        }
    };
}

pub(crate) use sql_fns;
