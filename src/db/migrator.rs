//! The migration list: each entry is one SQL file of `migrations/`, named after it.

use sea_orm_migration::prelude::*;

pub(crate) struct Migrator;

/// One plain-SQL migration, embedded at compile time.
struct SqlMigration {
    name: &'static str,
    sql: &'static str,
}

impl MigrationName for SqlMigration {
    fn name(&self) -> &str {
        self.name
    }
}

// `&SchemaManager` as sea-orm-migration's trait declares it: with async_trait, naming its
// lifetime (`SchemaManager<'_>`) no longer matches the trait's signature (E0195).
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for SqlMigration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(self.sql).await.map(|_| ())
    }
}

macro_rules! sql_migration {
    ($name:literal) => {
        Box::new(SqlMigration { name: $name, sql: include_str!(concat!("../../migrations/", $name, ".sql")) })
    };
}

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            sql_migration!("0001_forum_core"),
            sql_migration!("0002_like_versions"),
            sql_migration!("0003_view_flushes"),
            sql_migration!("0004_feed_outbox"),
            sql_migration!("0005_likes_membership_fence"),
            sql_migration!("0006_like_shard_epochs"),
            sql_migration!("0007_membership_notify"),
            sql_migration!("0008_roster_and_identity"),
            sql_migration!("0009_notifications_and_hot_ranking"),
            sql_migration!("0010_user_provisioning"),
            sql_migration!("0011_questions_and_staff"),
            sql_migration!("0012_announcements"),
            sql_migration!("0013_search"),
            sql_migration!("0014_unread"),
            sql_migration!("0015_title_words"),
            sql_migration!("0016_search_windows"),
            sql_migration!("0017_title_versions"),
            sql_migration!("0018_search_post_windows"),
            sql_migration!("0019_title_rows_planned_once"),
            sql_migration!("0020_like_rows_fenced_by_their_writers"),
            sql_migration!("0021_like_rows_know_their_course"),
            sql_migration!("0022_search_stamps"),
            sql_migration!("0023_stamps_after_update"),
            sql_migration!("0024_search_departures"),
            sql_migration!("0025_search_buckets"),
            sql_migration!("0026_comment_bucket_matches"),
            sql_migration!("0027_bucket_matches_without_index_words"),
        ]
    }
}
