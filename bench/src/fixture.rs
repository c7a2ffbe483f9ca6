//! A throwaway database for one benchmark run: created, migrated, seeded with one course, one
//! hot post and N members (more posts on demand), and dropped afterwards.

use std::time::Duration;

use course_forum::testing::db::{self, stmt};
use course_forum::testing::error::AppResult;
use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

pub struct Fixture {
    admin: DatabaseConnection,
    pub name: String,
    pub url: String,
    pub db: DatabaseConnection,
}

impl Fixture {
    /// Course 1 with post 1 (by user 1) and `members` more users (ids 2..=members+1), all members.
    pub async fn create(admin_url: &str, members: i64) -> AppResult<Fixture> {
        let admin = db::connect_url(admin_url, Duration::from_secs(5), 1).await?;
        let name = format!("cf_bench_{}", uuid::Uuid::new_v4().simple());
        admin.execute_unprepared(&format!("CREATE DATABASE \"{name}\"")).await?;
        let url = database_url(admin_url, &name);
        let db = db::connect_url(&url, Duration::from_secs(5), 4).await?;
        db::migrate(&db).await?;
        db.execute_unprepared(
            "INSERT INTO courses (code, title) VALUES ('BENCH', 'Benchmark course'); \
             INSERT INTO users (handle, display_name) VALUES ('author', 'Author'); \
             INSERT INTO course_members (course_id, user_id, role) VALUES (1, 1, 'instructor'); \
             INSERT INTO posts (course_id, user_id, title, body) VALUES (1, 1, 'hot post', 'everyone likes this')",
        )
        .await?;
        db.execute_raw(stmt(
            "WITH u AS (INSERT INTO users (handle, display_name) \
                SELECT 'v' || n, 'Voter ' || n FROM generate_series(1, $1) n RETURNING id) \
             INSERT INTO course_members (course_id, user_id, role) SELECT 1, id, 'student' FROM u",
            [members.into()],
        ))
        .await?;
        Ok(Fixture { admin, name, url, db })
    }

    /// A database an earlier run kept (`bench search --keep-database`), as it is: the same
    /// data, measured again without generating it. Its schema is left alone, so a build from
    /// before a migration can be measured on it (`course-forum migrate` brings it forward).
    pub async fn open(admin_url: &str, name: &str) -> AppResult<Fixture> {
        let admin = db::connect_url(admin_url, Duration::from_secs(5), 1).await?;
        let url = database_url(admin_url, name);
        let db = db::connect_url(&url, Duration::from_secs(5), 4).await?;
        Ok(Fixture { admin, name: name.to_owned(), url, db })
    }

    /// Adds `count` posts to course 1, written in turn by users 2..=authors+1; returns their ids
    /// oldest first.
    pub async fn add_posts(&self, count: i64, authors: i64, title: &str) -> AppResult<Vec<i64>> {
        #[derive(FromQueryResult)]
        struct Id {
            id: i64,
        }
        let rows = Id::find_by_statement(stmt(
            "INSERT INTO posts (course_id, user_id, title, body) \
             SELECT 1, 2 + (n % $2), $3 || ' ' || n, 'Post body ' || n FROM generate_series(1, $1) n \
             ORDER BY n RETURNING id",
            [count.into(), authors.max(1).into(), title.into()],
        ))
        .all(&self.db)
        .await?;
        let mut ids: Vec<i64> = rows.into_iter().map(|r| r.id).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// A second course, `code`, whose members are users `first..=last` (students); its id.
    pub async fn add_course(&self, code: &str, first: i64, last: i64) -> AppResult<i64> {
        #[derive(FromQueryResult)]
        struct Id {
            id: i64,
        }
        let course = Id::find_by_statement(stmt(
            "INSERT INTO courses (code, title) VALUES ($1, $1) RETURNING id",
            [code.into()],
        ))
        .one(&self.db)
        .await?
        .map_or(0, |r| r.id);
        self.db
            .execute_raw(stmt(
                "INSERT INTO course_members (course_id, user_id, role) \
                 SELECT $1, u, 'student' FROM generate_series($2::bigint, $3::bigint) u",
                [course.into(), first.into(), last.into()],
            ))
            .await?;
        Ok(course)
    }

    /// Adds `count` posts by `author` to `course`, each with a body of `body_bytes` bytes
    /// (at least a few): large bodies make every cached copy of a post cost what it would in
    /// a real course. Returns their ids, oldest first.
    pub async fn add_posts_sized(
        &self,
        course: i64,
        count: i64,
        author: i64,
        body_bytes: usize,
    ) -> AppResult<Vec<i64>> {
        #[derive(FromQueryResult)]
        struct Id {
            id: i64,
        }
        let rows = Id::find_by_statement(stmt(
            "INSERT INTO posts (course_id, user_id, title, body) \
             SELECT $1, $3, 'post ' || n, rpad('Post body ' || n || ' ', $4, 'lorem ipsum ') \
             FROM generate_series(1, $2) n ORDER BY n RETURNING id",
            [course.into(), count.into(), author.into(), (body_bytes.max(16) as i32).into()],
        ))
        .all(&self.db)
        .await?;
        let mut ids: Vec<i64> = rows.into_iter().map(|r| r.id).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Gives `post` `comments` comments by `author`, each with `replies` replies: a thread
    /// that is expensive to read in full.
    pub async fn add_thread(&self, post: i64, comments: i64, replies: i64, author: i64) -> AppResult<()> {
        self.db
            .execute_raw(stmt(
                "WITH c AS (INSERT INTO comments (post_id, user_id, body, reply_count) \
                   SELECT $1, $4, 'comment ' || n, $3 FROM generate_series(1, $2) n RETURNING id) \
                 INSERT INTO comments (post_id, parent_id, reply_to_user_id, user_id, body) \
                 SELECT $1, c.id, $4, $4, 'reply ' || r FROM c, generate_series(1, $3) r",
                [post.into(), comments.into(), replies.into(), author.into()],
            ))
            .await?;
        self.db
            .execute_raw(stmt("UPDATE posts SET comment_count = $2 WHERE id = $1", [post.into(), comments.into()]))
            .await?;
        Ok(())
    }

    /// The like count and the like rows of a post, read in one statement.
    pub async fn post_likes(&self, post_id: i64) -> AppResult<(i64, i64)> {
        #[derive(FromQueryResult)]
        struct Counts {
            counter: i64,
            rows: i64,
        }
        let counts = Counts::find_by_statement(stmt(
            "SELECT like_count::bigint AS counter, \
                    (SELECT count(*) FROM post_likes WHERE post_id = $1) AS rows \
             FROM posts WHERE id = $1",
            [post_id.into()],
        ))
        .one(&self.db)
        .await?;
        Ok(counts.map_or((0, 0), |c| (c.counter, c.rows)))
    }

    pub async fn drop(self) -> AppResult<()> {
        self.db.close().await?;
        self.admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)).await?;
        Ok(())
    }
}

/// The URL of database `name` on the admin URL's server, with its parameters (`?sslmode=…`
/// included).
fn database_url(admin_url: &str, name: &str) -> String {
    let (without_query, query) = admin_url.split_once('?').map_or((admin_url, None), |(u, q)| (u, Some(q)));
    let base = without_query.rsplit_once('/').map(|(base, _)| base).unwrap_or(without_query);
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}
