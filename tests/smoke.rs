//! The harness itself: an app comes up on its own database and answers as the viewer.

mod common;

use common::{TestApp, World, gid};
use serde_json::json;

#[tokio::test]
async fn me_and_my_courses_answer_for_the_token_holder() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let data = app.gql_ok(Some(&token), "{ me { id handle } myCourses { id code myRole } }", json!({})).await;
    assert_eq!(data["me"]["handle"], "alice");
    assert_eq!(data["me"]["id"], gid("User", world.alice));
    assert_eq!(data["myCourses"], json!([{ "id": gid("Course", world.course), "code": "CS101", "myRole": "STUDENT" }]));
}
