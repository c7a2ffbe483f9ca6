//! Every Redis key this service uses, named in one place. All keys start with the configured
//! prefix, so tests (and several deployments) can share one Redis without meeting.

/// Builds key names under one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Fixed-window counter of a user's like toggles (STRING, expires with the window).
    pub fn like_rate(&self, user_id: i64) -> String {
        format!("{}:rl:like:{user_id}", self.prefix)
    }
}
