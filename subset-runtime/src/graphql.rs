//! The `async-graphql` feature: a [`Cursor`] is a Relay cursor of `async-graphql`'s
//! connections, and a [`Page`] turns into a [`Connection`] with its page info.

use async_graphql::connection::{
    Connection, ConnectionNameType, CursorType, Edge, EdgeNameType, EmptyFields,
    NodesFieldSwitcherSealed,
};
use async_graphql::OutputType;

use crate::cursor::{Cursor, Page};
use crate::error::{Error, Result};

/// A cursor's GraphQL form is its token ([`Cursor::encode`]); a token [`Cursor::decode`]
/// refuses is [`Error::InvalidCursor`], which `async-graphql` reports as the field's error.
#[cfg_attr(docsrs, doc(cfg(feature = "async-graphql")))]
impl CursorType for Cursor {
    type Error = Error;

    fn decode_cursor(token: &str) -> Result<Self> {
        Cursor::decode(token)
    }

    fn encode_cursor(&self) -> String {
        self.encode()
    }
}

/// One edge per child with its cursor, and `pageInfo` from [`Page::has_previous`],
/// [`Page::has_next`] and the end cursors, so that a resolver returns
/// `handle.page(&id, &request).await?.into()`.
#[cfg_attr(docsrs, doc(cfg(feature = "async-graphql")))]
impl<C, Name, EdgeName, NodesField> From<Page<C>>
    for Connection<Cursor, C, EmptyFields, EmptyFields, Name, EdgeName, NodesField>
where
    C: OutputType,
    Name: ConnectionNameType,
    EdgeName: EdgeNameType,
    NodesField: NodesFieldSwitcherSealed,
{
    fn from(page: Page<C>) -> Self {
        let mut connection = Connection::new(page.has_previous(), page.has_next());
        connection.edges = page
            .cursors
            .into_iter()
            .zip(page.items)
            .map(|(cursor, child)| Edge::new(cursor, child))
            .collect();
        connection
    }
}

#[cfg(test)]
mod tests {
    use crate::bson::Bson;
    use async_graphql::{EmptyMutation, EmptySubscription, Object, Schema, SimpleObject};

    use super::*;

    #[derive(SimpleObject)]
    struct Review {
        author: String,
    }

    fn cursor(i: i32) -> Cursor {
        Cursor {
            field: "recent".into(),
            parent: Bson::Int32(7),
            position: vec![Bson::Int32(i)],
        }
    }

    struct Query;

    #[Object]
    impl Query {
        /// A backward page of two reviews with more before it, as the engine makes one.
        async fn reviews(&self) -> Connection<Cursor, Review> {
            let items = vec![
                Review {
                    author: "ana".into(),
                },
                Review {
                    author: "bo".into(),
                },
            ];
            Page::new(items, vec![cursor(1), cursor(2)], true, false).into()
        }

        /// Reads a client's cursor argument back.
        async fn position(&self, after: String) -> async_graphql::Result<String> {
            let cursor = Cursor::decode_cursor(&after)?;
            Ok(format!("{:?}", cursor.position))
        }
    }

    #[test]
    fn a_page_answers_a_relay_query() {
        let schema = Schema::new(Query, EmptyMutation, EmptySubscription);
        let query = "{ reviews { edges { cursor node { author } } \
                     pageInfo { hasPreviousPage hasNextPage startCursor endCursor } } }";
        let response = futures::executor::block_on(schema.execute(query));
        assert!(response.errors.is_empty(), "{:?}", response.errors);
        let json = serde_json::to_value(&response.data).unwrap();
        let reviews = &json["reviews"];
        let (first, second) = (cursor(1).encode(), cursor(2).encode());
        assert_eq!(reviews["edges"][0]["cursor"], first.as_str());
        assert_eq!(reviews["edges"][1]["node"]["author"], "bo");
        let info = &reviews["pageInfo"];
        assert_eq!(info["hasPreviousPage"], true);
        assert_eq!(info["hasNextPage"], false);
        assert_eq!(info["startCursor"], first.as_str());
        assert_eq!(info["endCursor"], second.as_str());

        let query = format!("{{ position(after: \"{second}\") }}");
        let response = futures::executor::block_on(schema.execute(query));
        assert!(response.errors.is_empty(), "{:?}", response.errors);
        let response = futures::executor::block_on(schema.execute("{ position(after: \"%\") }"));
        assert_eq!(
            response.errors[0].message,
            "invalid page cursor: the token is not base64url"
        );
    }
}
