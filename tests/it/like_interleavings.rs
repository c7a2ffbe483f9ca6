//! Model-based, in buffered mode (the default users get): random interleavings of likes and
//! unlikes by many users on a few targets with everything that goes wrong around them —
//! workers stepping in random order, a worker running beside the toggles and stopped, liked-sets
//! dropped or expired, reconcile runs, a worker stalled past its lease while another takes its
//! shard, and worker processes killed (SIGABRT) before or after their COMMIT. After things
//! settle, every (user, target) must show the user's last accepted action: the row exists
//! exactly when it was a like, `likedByMe` agrees, every counter equals its rows, and
//! `course-forum check` finds nothing wrong.
//!
//! One fixed seed runs in `script/test`. More: `LIKE_MODEL_SEEDS=1..50` (a range) or
//! `LIKE_MODEL_SEEDS=3,7,9`; `LIKE_MODEL_OPS=400` changes the length of each run.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::likes::recount;
use course_forum::testing::worker::LikeWorker;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::common::likes::{Target, drain_all, has_row, liked_by_me, rows_and_counter, run_crashing_worker, toggle};
use crate::common::{self, TestApp, World};

const USERS: usize = 6;
const DEFAULT_SEED: u64 = 20261203;
const DEFAULT_OPS: usize = 220;
/// Worker processes killed per run at most (each costs a process start and a lapsed lease).
const MAX_KILLS: usize = 2;

fn seeds() -> Vec<u64> {
    let Ok(spec) = std::env::var("LIKE_MODEL_SEEDS") else { return vec![DEFAULT_SEED] };
    if let Some((first, end)) = spec.split_once("..") {
        let first: u64 = first.trim().parse().expect("LIKE_MODEL_SEEDS=<first>..<end>");
        let end: u64 = end.trim().parse().expect("LIKE_MODEL_SEEDS=<first>..<end>");
        return (first..end).collect();
    }
    spec.split(',').map(|s| s.trim().parse().expect("LIKE_MODEL_SEEDS is a list of numbers")).collect()
}

fn ops_per_run() -> usize {
    std::env::var("LIKE_MODEL_OPS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_OPS)
}

struct Forum {
    course: i64,
    users: Vec<i64>,
    targets: Vec<Target>,
}

async fn build_forum(app: &TestApp) -> Forum {
    let world = World::create(app).await;
    let mut users = vec![world.alice, world.bob];
    while users.len() < USERS {
        let user = app.create_user(&format!("member{}", users.len())).await;
        app.enroll(world.course, user, "student").await;
        users.push(user);
    }
    let token = app.token(world.instructor);
    let mut targets = Vec::new();
    for n in 0..3 {
        targets.push(Target::Post(app.create_post(&token, world.course, &format!("post {n}")).await));
    }
    let Target::Post(first) = targets[0] else { unreachable!("the first target is a post") };
    targets.push(Target::Comment(app.create_comment(&token, first, "c").await));
    Forum { course: world.course, users, targets }
}

/// What happened in one run, for the summary line.
#[derive(Default, Debug)]
struct Tally {
    toggles: usize,
    steps: usize,
    drops: usize,
    reconciles: usize,
    lease_losses: usize,
    fenced_commits: usize,
    kills: usize,
    running_periods: usize,
}

struct Run<'a> {
    app: &'a TestApp,
    forum: Forum,
    rng: StdRng,
    /// The last accepted action of each (user, target): true like, false unlike.
    last: BTreeMap<(i64, Target), bool>,
    /// Two in-process workers that compete for the shards.
    workers: [LikeWorker; 2],
    tally: Tally,
}

impl Run<'_> {
    async fn random_toggle(&mut self) -> i64 {
        let user = self.forum.users[self.rng.random_range(0..self.forum.users.len())];
        let target = self.forum.targets[self.rng.random_range(0..self.forum.targets.len())];
        // Biased towards likes so counters climb and unlikes hit real rows.
        let liked = self.rng.random_bool(0.6);
        toggle(self.app, user, target, liked).await;
        self.last.insert((user, target), liked);
        self.tally.toggles += 1;
        user
    }

    fn shard(&mut self) -> u32 {
        self.rng.random_range(0..self.app.state.keys.shards())
    }

    async fn step(&mut self) {
        let worker = self.workers[self.rng.random_range(0..2)].clone();
        let shard = self.shard();
        // Step by step, or pipelined as the running worker does, in any mix.
        if self.rng.random_bool(0.5) {
            worker.process_one_batch(shard).await.expect("step");
        } else {
            worker.process_pipelined(shard).await.expect("pipelined step");
        }
        self.tally.steps += 1;
    }

    async fn drop_sets(&mut self) {
        let mut conn = self.app.state.redis.clone();
        let user = self.forum.users[self.rng.random_range(0..self.forum.users.len())];
        let set = self.app.state.keys.liked_set(user, self.forum.course);
        match self.rng.random_range(0..3) {
            // `course-forum reset-like-cache`
            0 => drop(self.app.state.likes.liked_sets().drop_all().await.expect("drop all")),
            // An eviction of one set.
            1 => drop(redis::cmd("UNLINK").arg(&set).query_async::<i64>(&mut conn).await.expect("unlink")),
            // Its TTL runs out.
            _ => drop(redis::cmd("PEXPIRE").arg(&set).arg(1).query_async::<i64>(&mut conn).await.expect("pexpire")),
        }
        self.tally.drops += 1;
    }

    async fn reconcile(&mut self) {
        recount::reconcile_all(&self.app.db, 1000).await.expect("reconcile");
        self.tally.reconciles += 1;
    }

    /// The holder of a shard reads a batch and stalls before its transaction; its lease lapses;
    /// the other worker takes the shard and applies (with more toggles meanwhile); the stalled
    /// one wakes up and must not commit.
    async fn lease_loss(&mut self) {
        // Something to read on the shard: a toggle by a user whose events it carries.
        let user = self.random_toggle().await;
        let shard = self.app.state.keys.shard_of(user);
        let (a, b) = if self.workers[0].hold_lease(shard).await.expect("hold") {
            (self.workers[0].clone(), self.workers[1].clone())
        } else if self.workers[1].hold_lease(shard).await.expect("hold") {
            (self.workers[1].clone(), self.workers[0].clone())
        } else {
            return; // a killed process's lease has not lapsed yet
        };
        let gate = &a.hooks().before_apply;
        let before = gate.reached();
        let held = gate.hold().await;
        let stalled = {
            let a = a.clone();
            tokio::spawn(async move { a.process_one_batch(shard).await })
        };
        while gate.reached() == before && !stalled.is_finished() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if gate.reached() == before {
            // Nothing to read: no batch to stall.
            drop(held);
            stalled.await.expect("task").expect("step");
            return;
        }
        let mut conn = self.app.state.redis.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(self.app.state.keys.worker_lease(shard))
            .query_async(&mut conn)
            .await
            .expect("lapse the lease");
        for _ in 0..self.rng.random_range(1..4) {
            if self.rng.random_bool(0.5) {
                self.random_toggle().await;
            }
            b.process_one_batch(shard).await.expect("the taker's step");
        }
        drop(held);
        let report = stalled.await.expect("task").expect("the stalled step");
        assert!(!report.leader && report.acked == 0, "a worker past its lease committed: {report:?}");
        self.tally.lease_losses += 1;
        self.tally.fenced_commits += 1;
    }

    /// A worker process aborts in its first batch, before or after COMMIT.
    async fn kill(&mut self) {
        if self.tally.kills >= MAX_KILLS || common::likes::unapplied(self.app).await == 0 {
            return;
        }
        for worker in &self.workers {
            worker.release_leases().await;
        }
        let fault = if self.rng.random_bool(0.5) { "abort-before-commit" } else { "abort-after-commit" };
        let status = run_crashing_worker(self.app, fault);
        assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT ({fault}): {status:?}");
        self.tally.kills += 1;
    }

    /// A worker runs on its own (as in `serve`) while users keep toggling, then stops.
    async fn running_period(&mut self) {
        for worker in &self.workers {
            worker.release_leases().await;
        }
        let worker = self.app.worker().await;
        let (stop, stopping) = watch::channel(false);
        let running = tokio::spawn(worker.run(stopping));
        for _ in 0..self.rng.random_range(2..8) {
            self.random_toggle().await;
        }
        let _ = stop.send(true);
        running.await.expect("the worker stops");
        self.tally.running_periods += 1;
    }
}

async fn run_model(seed: u64, ops: usize) -> Tally {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.like_batch_size = 3;
        s.like_stream_shards = 2;
    })
    .await;
    let forum = build_forum(&app).await;
    let workers = [app.worker().await, app.worker().await];
    let mut run = Run {
        app: &app,
        forum,
        rng: StdRng::seed_from_u64(seed),
        last: BTreeMap::new(),
        workers,
        tally: Tally::default(),
    };

    for _ in 0..ops {
        match run.rng.random_range(0..100) {
            0..55 => drop(run.random_toggle().await),
            55..72 => run.step().await,
            72..79 => run.drop_sets().await,
            79..84 => run.reconcile().await,
            84..91 => run.lease_loss().await,
            91..95 => run.kill().await,
            _ => run.running_period().await,
        }
    }

    // Settle: every lease given up or lapsed, every stream applied.
    for worker in &run.workers {
        worker.release_leases().await;
    }
    drain_all(&app, &run.workers[0]).await;
    verify(&run, seed).await;
    // Once more from cold sets: a reload with nothing pending agrees too.
    app.state.likes.liked_sets().drop_all().await.expect("drop all");
    verify(&run, seed).await;
    let report =
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(3600))
            .await
            .expect("check");
    assert_eq!(report.failed(), 0, "seed {seed}: course-forum check:\n{report}");
    std::mem::take(&mut run.tally)
}

async fn verify(run: &Run<'_>, seed: u64) {
    let app = run.app;
    for target in &run.forum.targets {
        let mut expected = 0;
        for user in &run.forum.users {
            let wants = run.last.get(&(*user, *target)).copied().unwrap_or(false);
            expected += i64::from(wants);
            assert_eq!(has_row(app, *user, *target).await, wants, "seed {seed}: row of user {user} on {target:?}");
            let liked = app
                .state
                .likes
                .liked_by(*user, &[(run.forum.course, target.domain())])
                .await
                .expect("liked_by")
                .contains(&target.domain());
            assert_eq!(liked, wants, "seed {seed}: likedByMe of user {user} on {target:?}");
            if let Target::Post(post) = target {
                assert_eq!(liked_by_me(app, *user, *post).await, wants, "seed {seed}: API likedByMe, user {user}");
            }
        }
        assert_eq!(rows_and_counter(app, *target).await, (expected, expected), "seed {seed}: {target:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_accepted_action_wins_under_drops_races_stalls_and_kills() {
    let ops = ops_per_run();
    for seed in seeds() {
        let tally = run_model(seed, ops).await;
        eprintln!("like model: seed {seed}, {ops} steps: {tally:?}");
        assert!(tally.toggles > ops / 3, "seed {seed}: the run toggled");
    }
}
