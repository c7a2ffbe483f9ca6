//! Writing forum content through the API, as a member would: posts, comments, replies and
//! deletes. Every helper goes through GraphQL (`TestApp::gql_ok`, so any error fails the test)
//! and returns the database id; `gid("Post", id)` gives the global id. Likes are in
//! `common::likes` (`toggle`).

use std::net::SocketAddr;

use serde_json::json;

use super::{TestApp, gid, raw_id};

impl TestApp {
    /// Creates a post through `createPost` as the token's user (body `"body"`); returns its
    /// database id.
    pub async fn create_post(&self, token: &str, course: i64, title: &str) -> i64 {
        self.create_post_at(self.addr, token, course, title).await
    }

    /// `create_post` as the user with this database id.
    pub async fn create_post_as(&self, user: i64, course: i64, title: &str) -> i64 {
        self.create_post(&self.token(user), course, title).await
    }

    /// `create_post` on another instance (a `Peer`) on the same database and prefix.
    pub async fn create_post_at(&self, addr: SocketAddr, token: &str, course: i64, title: &str) -> i64 {
        let response = self
            .gql_at(
                addr,
                Some(token),
                "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"body\") { id } }",
                json!({ "c": gid("Course", course), "t": title }),
            )
            .await;
        assert!(response.get("errors").is_none(), "createPost: {response}");
        raw_id(response["data"]["createPost"]["id"].as_str().unwrap_or_else(|| panic!("createPost: {response}")))
    }

    /// Comments on a post through `createComment` as the token's user; returns the comment's
    /// database id.
    pub async fn create_comment(&self, token: &str, post: i64, body: &str) -> i64 {
        let data = self
            .gql_ok(
                Some(token),
                "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
                json!({ "p": gid("Post", post), "b": body }),
            )
            .await;
        raw_id(data["createComment"]["id"].as_str().expect("comment id"))
    }

    /// Replies through `createReply` to `target`, the global id of a comment or of a reply;
    /// returns the reply's database id.
    pub async fn create_reply(&self, token: &str, target: &str, body: &str) -> i64 {
        let data = self
            .gql_ok(
                Some(token),
                "mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) { id } }",
                json!({ "c": target, "b": body }),
            )
            .await;
        raw_id(data["createReply"]["id"].as_str().expect("reply id"))
    }

    /// Deletes a post through `deletePost` as the token's user, and checks the answer names it.
    pub async fn delete_post(&self, token: &str, post: i64) {
        let data = self
            .gql_ok(
                Some(token),
                "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
                json!({ "p": gid("Post", post) }),
            )
            .await;
        assert_eq!(data["deletePost"]["deletedId"], gid("Post", post));
    }
}
