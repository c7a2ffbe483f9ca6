//! Shared live payloads: a `likeCounts` subscription on a websocket whose selection reads only
//! what is the same for every reader of the object is not executed per subscriber. Its count
//! updates are rendered once per value and selection by the target's group (`live::fanout`),
//! and each socket sends that payload inside a frame with its own subscription id.
//!
//! Which fields are shared, and why that is safe with the access rules:
//! - `__typename`, `id`, `likeCount`, `likeVersion` and `likeCountCommittedAt` of the `Post`,
//!   `Comment` or `Reply` an update carries, under any alias, directly or in inline fragments
//!   and fragment spreads on `Likeable`, `Node`, `AnyComment`, `Post`, `Comment` or `Reply`.
//!   Each is a function of the object and its committed count alone, never of who reads: no
//!   author, no body, nothing of the viewer. So two members who may both see the object see
//!   the same bytes. Like counts of a private post or of an anonymous author's post name nobody.
//! - Whether a subscriber may see the object at all is decided per subscriber, as before: the
//!   `likeCounts` resolver checks every id when the subscription starts, and the subscription
//!   then ends with FORBIDDEN when its viewer leaves a watched course (or stops being staff
//!   where it watches someone else's private post; `revocation`). While such a change is
//!   checked, the subscription's frames are held in its socket's mailbox, so nothing is
//!   delivered past it.
//! - Anything else (a field outside that list such as `likedByMe` or `title`, arguments, a
//!   directive, another type condition) makes the subscription run per subscriber through the
//!   schema, as every other subscription does.
//!
//! The grouping key is the normalized selection (response keys and fields per concrete type, in
//! the order the client wrote them) and the target: variables cannot change such a selection
//! (no arguments, no directives), and the ids only choose which targets a subscriber joins.
//!
//! Once started, a shared subscription keeps nothing of the schema's execution. Its resolver
//! leaves what it holds (`Detached`: its group memberships, mailbox slot, budget permit and
//! access watch) in the request's `Handoff` and returns an empty stream, and the socket's
//! executor (`SocketExecutor`) then drops the execution (its stream, the query environment, the
//! request's document and variables) and keeps the `Detached` in its place. The protocol
//! handler still holds that stream under the subscription's id, so a client's `complete`
//! (legacy `stop`), an id reused for another subscribe, or the socket's end drop it exactly as
//! they drop an executed subscription, and a lost access reaches the client as the same `next`
//! with FORBIDDEN, then `complete`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql::{Context, Data, Executor, PathSegment, Pos, Request, Response};
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use tokio::runtime::Handle;

use super::AppSchema;
use super::ids::{self, NodeKind};
use super::revocation::{AccessScope, Gate, until_access_lost_gated};
use super::types::Likeable;
use crate::like_event::LikeTarget;
use crate::live::fanout::{GroupMembership, Mailbox, Render};
use crate::live::hub::{Hub, HubGuard, VersionedCount};
use crate::membership::MembershipWatch;

/// Deepest nesting of inline fragments and spreads a shared selection may have. The walk runs
/// after `document_limits` measured the document (its selections with every spread expanded,
/// and no fragment spreading itself), so its work is bounded by that budget; this bound keeps
/// it short whatever the budget.
const MAX_FRAGMENT_DEPTH: usize = 8;

/// The operation a request runs: the one it names, or the document's only one. None when the
/// schema will refuse the request for naming none or an unknown one.
pub(crate) fn operation<'d>(document: &'d ExecutableDocument, name: Option<&str>) -> Option<&'d OperationDefinition> {
    match (&document.operations, name) {
        (DocumentOperations::Single(operation), _) => Some(&operation.node),
        (DocumentOperations::Multiple(operations), Some(name)) => operations.get(name).map(|o| &o.node),
        (DocumentOperations::Multiple(operations), None) if operations.len() == 1 => {
            operations.values().next().map(|o| &o.node)
        }
        (DocumentOperations::Multiple(_), None) => None,
    }
}

/// A field every reader of a like update sees alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedField {
    Typename,
    Id,
    LikeCount,
    LikeVersion,
    LikeCountCommittedAt,
}

impl SharedField {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "__typename" => SharedField::Typename,
            "id" => SharedField::Id,
            "likeCount" => SharedField::LikeCount,
            "likeVersion" => SharedField::LikeVersion,
            "likeCountCommittedAt" => SharedField::LikeCountCommittedAt,
            _ => return None,
        })
    }
}

/// The concrete types an update can be, as indexes into `LiveShape::fields`.
const POST: usize = 0;
const COMMENT: usize = 1;
const REPLY: usize = 2;

/// Which concrete types a type condition covers (a bit per index above).
fn types_of(condition: &str) -> Option<u8> {
    Some(match condition {
        "Likeable" | "Node" => 0b111,
        "AnyComment" => 0b110,
        "Post" => 0b001,
        "Comment" => 0b010,
        "Reply" => 0b100,
        _ => return None,
    })
}

/// The normalized selection of a shareable `likeCounts` subscription.
#[derive(Debug)]
pub(crate) struct LiveShape {
    /// The response key of `likeCounts` (its alias, if any).
    root_key: String,
    /// Per concrete type: its response keys and fields, in first-appearance order.
    fields: [Vec<(String, SharedField)>; 3],
    /// The grouping key: everything above, as one string.
    key: Arc<str>,
}

/// Request data of a subscription whose selection may be shared (set from its document by
/// `socket::mark_subscription`, on websockets only).
#[derive(Clone)]
pub(crate) struct SharedSelection(pub(crate) Arc<LiveShape>);

/// Notes on `request` that the subscription it runs may be delivered shared; its shape is the
/// one `shapes` holds for it, when given.
pub(crate) fn mark_shared(request: &mut Request, document: &ExecutableDocument, shapes: Option<&SharedShapes>) {
    if let Some(shape) = shape_of(document, request.operation_name.as_deref()) {
        let shape = match shapes {
            Some(shapes) => shapes.intern(shape),
            None => Arc::new(shape),
        };
        request.data.insert(SharedSelection(shape));
    }
}

/// Schema data: one `LiveShape` per distinct shape among the shared subscriptions running in
/// this process. A running subscription keeps its shape for its life (async-graphql keeps the
/// request's data), and 15,000 subscribers of one document would otherwise keep 15,000 copies
/// of about 800 bytes each.
///
/// Entries are weak: a shape lives as long as a subscription holds it. The dead ones are swept
/// when the table has doubled since the last sweep, so it holds at most about twice the shapes
/// alive, each of them held by a subscription of an acknowledged (authenticated) socket.
#[derive(Default)]
pub(crate) struct SharedShapes(Mutex<ShapeTable>);

#[derive(Default)]
struct ShapeTable {
    by_key: HashMap<Arc<str>, Weak<LiveShape>>,
    /// The table's length past which the next insert sweeps it.
    sweep_past: usize,
}

/// Fewest entries the table holds before it sweeps.
const SHAPES_BEFORE_SWEEP: usize = 64;

impl SharedShapes {
    /// The running shape equal to `shape` (same key), or `shape` itself from now on.
    pub(crate) fn intern(&self, shape: LiveShape) -> Arc<LiveShape> {
        let mut table = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(running) = table.by_key.get(&shape.key).and_then(Weak::upgrade) {
            return running;
        }
        let shape = Arc::new(shape);
        table.by_key.insert(shape.key.clone(), Arc::downgrade(&shape));
        if table.by_key.len() > table.sweep_past {
            table.by_key.retain(|_, shape| shape.strong_count() > 0);
            table.sweep_past = (2 * table.by_key.len()).max(SHAPES_BEFORE_SWEEP);
        }
        shape
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).by_key.len()
    }
}

/// The shape of `document`'s operation when it is exactly one `likeCounts` field whose
/// selection reads shared fields only; None otherwise (the subscription then runs per
/// subscriber).
pub(crate) fn shape_of(document: &ExecutableDocument, operation_name: Option<&str>) -> Option<LiveShape> {
    let operation = operation(document, operation_name)?;
    if !operation.directives.is_empty() {
        return None;
    }
    let [root] = operation.selection_set.node.items.as_slice() else { return None };
    let Selection::Field(root) = &root.node else { return None };
    let root = &root.node;
    if root.name.node.as_str() != "likeCounts" || !root.directives.is_empty() {
        return None;
    }
    let mut fields: [Vec<(String, SharedField)>; 3] = Default::default();
    collect(&root.selection_set.node, 0b111, document, &mut fields, 0)?;
    let root_key = root.response_key().node.to_string();
    let mut key = root_key.clone();
    for (index, list) in fields.iter().enumerate() {
        key.push_str(&format!("|{index}"));
        for (response_key, field) in list {
            key.push_str(&format!(" {response_key}:{field:?}"));
        }
    }
    Some(LiveShape { root_key, fields, key: key.into() })
}

/// Adds the fields of `set` to the concrete types in `types`; None at anything not shareable.
fn collect(
    set: &SelectionSet,
    types: u8,
    document: &ExecutableDocument,
    fields: &mut [Vec<(String, SharedField)>; 3],
    depth: usize,
) -> Option<()> {
    if depth > MAX_FRAGMENT_DEPTH {
        return None;
    }
    for item in &set.items {
        match &item.node {
            Selection::Field(field) => {
                let field = &field.node;
                if !field.directives.is_empty()
                    || !field.arguments.is_empty()
                    || !field.selection_set.node.items.is_empty()
                {
                    return None;
                }
                let shared = SharedField::named(field.name.node.as_str())?;
                let response_key = field.response_key().node.as_str();
                for (index, list) in fields.iter_mut().enumerate() {
                    // Validation makes one response key one field, so the first one stands.
                    if types & (1 << index) != 0 && !list.iter().any(|(key, _)| key == response_key) {
                        list.push((response_key.to_owned(), shared));
                    }
                }
            }
            Selection::InlineFragment(fragment) => {
                let fragment = &fragment.node;
                if !fragment.directives.is_empty() {
                    return None;
                }
                let covered = match &fragment.type_condition {
                    Some(condition) => types_of(condition.node.on.node.as_str())?,
                    None => 0b111,
                };
                collect(&fragment.selection_set.node, types & covered, document, fields, depth + 1)?;
            }
            Selection::FragmentSpread(spread) => {
                let spread = &spread.node;
                if !spread.directives.is_empty() {
                    return None;
                }
                let definition = &document.fragments.get(&spread.fragment_name.node)?.node;
                if !definition.directives.is_empty() {
                    return None;
                }
                let covered = types_of(definition.type_condition.node.on.node.as_str())?;
                collect(&definition.selection_set.node, types & covered, document, fields, depth + 1)?;
            }
        }
    }
    Some(())
}

/// The `payload` of a `next` (or legacy `data`) message: `{"data":{"<root>":{…}}}`, as the
/// schema would write it for `target` at `value`.
fn render(shape: &LiveShape, target: LikeTarget, kind: NodeKind, value: &VersionedCount) -> String {
    let (index, typename, id) = match (target, kind) {
        (LikeTarget::Post(id), _) => (POST, "Post", ids::encode(NodeKind::Post, id)),
        (LikeTarget::Comment(id), NodeKind::Reply) => (REPLY, "Reply", ids::encode(NodeKind::Reply, id)),
        (LikeTarget::Comment(id), _) => (COMMENT, "Comment", ids::encode(NodeKind::Comment, id)),
    };
    let likes = super::types::LiveLikes::of(value);
    let mut object = serde_json::Map::new();
    for (response_key, field) in &shape.fields[index] {
        let value = match field {
            SharedField::Typename => serde_json::Value::from(typename),
            SharedField::Id => serde_json::Value::from(id.as_str()),
            SharedField::LikeCount => serde_json::Value::from(likes.like_count),
            SharedField::LikeVersion => serde_json::Value::from(likes.like_version),
            SharedField::LikeCountCommittedAt => {
                likes.committed_at.map_or(serde_json::Value::Null, |at| serde_json::Value::from(at.to_rfc3339()))
            }
        };
        object.insert(response_key.clone(), value);
    }
    let mut data = serde_json::Map::new();
    data.insert(shape.root_key.clone(), serde_json::Value::Object(object));
    serde_json::json!({ "data": data }).to_string()
}

/// Request data: the id of the operation on its websocket (`http::ws` sets it on every
/// subscribe), spliced into each shared frame.
#[derive(Clone)]
pub(crate) struct OperationId(pub(crate) Arc<str>);

/// Connection data of a websocket: the mailbox its shared subscriptions receive their
/// payloads in (the socket writes what it holds, `http::ws`), and which message type carries a
/// result on its protocol.
#[derive(Clone)]
pub(crate) struct SocketFrames {
    /// `next` (graphql-transport-ws) or `data` (the legacy graphql-ws).
    result_type: &'static str,
    mailbox: Arc<Mailbox>,
}

impl SocketFrames {
    /// The shared frames of a socket: `legacy` for graphql-ws.
    pub(crate) fn new(legacy: bool) -> Self {
        Self { result_type: if legacy { "data" } else { "next" }, mailbox: Mailbox::new() }
    }

    /// Where the socket takes its shared frames from.
    pub(crate) fn mailbox(&self) -> Arc<Mailbox> {
        self.mailbox.clone()
    }
}

/// What a shared subscription needs from its request: its shape, its operation id, its socket,
/// and where to leave what it holds once started.
pub(crate) struct SharedDelivery {
    shape: Arc<LiveShape>,
    operation_id: Arc<str>,
    socket: SocketFrames,
    handoff: Handoff,
}

/// What a running shared subscription holds; dropped with the schema's side of it (the client
/// completed or replaced it, access was lost, or the socket closed): it leaves its groups and
/// its mailbox, so no frame of it is written after that.
struct Running {
    mailbox: Weak<Mailbox>,
    key: u64,
    _groups: Vec<GroupMembership>,
    _counted: HubGuard,
    _held: Box<dyn Send>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mailbox) = self.mailbox.upgrade() {
            mailbox.remove(self.key);
        }
    }
}

impl SharedDelivery {
    /// The shared delivery of the subscription `ctx` runs, when its selection is shareable and
    /// it came over a websocket; None otherwise.
    pub(crate) fn of(ctx: &Context<'_>) -> Option<Self> {
        Some(Self {
            shape: ctx.data_opt::<SharedSelection>()?.0.clone(),
            operation_id: ctx.data_opt::<OperationId>()?.0.clone(),
            socket: ctx.data_opt::<SocketFrames>()?.clone(),
            handoff: ctx.data_opt::<Handoff>()?.clone(),
        })
    }

    /// Joins the group of each target in `kinds` (what each is: a comment and a reply share a
    /// `LikeTarget`) for this selection: from now on each committed count of a target, at most
    /// one per `interval`, reaches the socket's mailbox as this subscription's frame.
    ///
    /// What it holds is left in the request's `Handoff` (`Detached`), which yields nothing but
    /// the FORBIDDEN of a lost access (so the client gets it, then `complete`, exactly as for an
    /// unshared subscription), holds the subscription's frames back while a membership change
    /// is checked, and holds `held` (the connection's subscription budget permit, say) for as
    /// long as it runs. The stream returned to the schema is empty: its execution ends here.
    pub(crate) fn start<H: Send + 'static>(
        self,
        ctx: &Context<'_>,
        hub: &Arc<Hub>,
        kinds: HashMap<LikeTarget, NodeKind>,
        interval: Duration,
        access: (MembershipWatch, AccessScope),
        held: H,
    ) -> BoxStream<'static, async_graphql::Result<Likeable>> {
        let id = serde_json::Value::from(&*self.operation_id).to_string();
        let prefix = format!(r#"{{"type":"{}","id":{id},"payload":"#, self.socket.result_type);
        let mailbox = self.socket.mailbox;
        let key = mailbox.add(prefix);
        let groups = kinds
            .into_iter()
            .map(|(target, kind)| {
                let shape = self.shape.clone();
                let group = format!("{kind:?} {}", shape.key).into();
                let render = move || -> Render { Arc::new(move |value| render(&shape, target, kind, value)) };
                hub.join_group(target, group, render, interval, &mailbox, key)
            })
            .collect();
        let running = Running {
            mailbox: Arc::downgrade(&mailbox),
            key,
            _groups: groups,
            _counted: hub.count_subscriber(),
            _held: Box::new(held),
        };
        let gate_mailbox = Arc::downgrade(&mailbox);
        let gate: Gate = Box::new(move |open| {
            if let Some(mailbox) = gate_mailbox.upgrade() {
                mailbox.set_open(key, open);
            }
        });
        let watch = until_access_lost_gated(futures_util::stream::pending::<()>(), access.0, access.1, Some(gate));
        let detached = Detached {
            _running: running,
            watch: watch.boxed(),
            position: ctx.item.pos,
            response_key: ctx.item.node.response_key().node.to_string(),
        };
        *self.handoff.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(detached);
        futures_util::stream::empty().boxed()
    }
}

/// Request data of a subscribe on a websocket (`SocketExecutor` adds it): where a shared
/// subscription leaves what it holds once started.
#[derive(Clone, Default)]
pub(crate) struct Handoff(Arc<Mutex<Option<Detached>>>);

impl Handoff {
    fn take(&self) -> Option<Detached> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }
}

/// A started shared subscription, without the schema's execution: its frames come through the
/// socket's mailbox, and as a stream it yields only the error of a lost access, then ends.
pub(crate) struct Detached {
    _running: Running,
    /// `until_access_lost_gated` over nothing: the FORBIDDEN of a lost access, then the end.
    watch: BoxStream<'static, async_graphql::Result<()>>,
    /// Where the subscription's root field is in its document, and its response key: the error
    /// names them as the schema would (`locations` and `path`).
    position: Pos,
    response_key: String,
}

impl Detached {
    /// The socket has it: its frames may leave from now on. Until then (the subscription was
    /// started on the handlers' runtime, `SocketExecutor`) its mailbox slot held them, so a
    /// client's `complete` or a reused id that came meanwhile lets none through.
    fn take_over(&self) {
        if let Some(mailbox) = self._running.mailbox.upgrade() {
            mailbox.set_open(self._running.key, true);
        }
    }
}

impl Stream for Detached {
    type Item = Response;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Response>> {
        // The watch yields nothing but the error of a lost access (its items are `()`).
        let lost = loop {
            match self.watch.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(lost))) => break lost,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        };
        let path = vec![PathSegment::Field(self.response_key.clone())];
        let mut response = Response::from_errors(vec![lost.into_server_error(self.position).with_path(path)]);
        // Coded and counted as the schema's execution does (`graphql::hooks`).
        super::errors::assign_codes(&mut response);
        super::metrics::record_errors("likeCounts", &response.errors);
        Poll::Ready(Some(response))
    }
}

/// The executor of a websocket's operations: the schema's, except that a shared subscription's
/// execution is let go as soon as it has started, and the socket keeps its `Detached` instead.
///
/// The schema's work runs on `home`, the request handlers' runtime, while the socket's loop
/// may run on the connections' lower-priority runtime (`live::runtime`): every database or
/// Redis connection an operation opens is then driven by the handlers' threads, and so is a
/// shared subscription's group, whose task its start spawns. A result crosses back through a
/// channel of one.
#[derive(Clone)]
pub(crate) struct SocketExecutor {
    schema: AppSchema,
    home: Handle,
}

impl SocketExecutor {
    pub(crate) fn new(schema: AppSchema, home: Handle) -> Self {
        Self { schema, home }
    }
}

impl Executor for SocketExecutor {
    fn execute(&self, request: Request) -> impl Future<Output = Response> + Send {
        let schema = self.schema.clone();
        let running = self.home.spawn(async move { schema.execute(request).await });
        async move { running.await.unwrap_or_else(|e| failed(&e)) }
    }

    fn execute_stream(&self, mut request: Request, session_data: Option<Arc<Data>>) -> BoxStream<'static, Response> {
        let handoff = Handoff::default();
        request.data.insert(handoff.clone());
        let schema = Executor::execute_stream(&self.schema, request, session_data);
        SocketStream::Executing(on_runtime(&self.home, schema), handoff).boxed()
    }
}

/// An execution that panicked, or was cancelled as the process stops: an error response.
fn failed(error: &dyn std::fmt::Display) -> Response {
    tracing::error!(%error, "a websocket operation's execution failed");
    Response::from_errors(vec![async_graphql::ServerError::new("internal error", None)])
}

/// `stream` polled by a task on `home`, one item at a time and only when the socket asks for
/// the next (as the protocol handler polled it before): nothing is computed ahead of the
/// socket, so a membership change heard before an item is computed is checked before it. The
/// task ends with the stream, or when what this returns is dropped (the client's `complete`,
/// the socket's end); a panic in it is answered with an error, then the end.
fn on_runtime(home: &Handle, mut stream: BoxStream<'static, Response>) -> BoxStream<'static, Response> {
    use futures_util::FutureExt;
    let (items, received) = tokio::sync::mpsc::channel::<Response>(1);
    let wanted = Arc::new(tokio::sync::Notify::new());
    let asked = wanted.clone();
    home.spawn(async move {
        loop {
            tokio::select! {
                () = asked.notified() => {}
                () = items.closed() => return,
            }
            let next = tokio::select! {
                next = std::panic::AssertUnwindSafe(stream.next()).catch_unwind() => next,
                () = items.closed() => return,
            };
            let (item, last) = match next {
                Ok(Some(item)) => (item, false),
                Ok(None) => return,
                Err(_) => (failed(&"the execution panicked"), true),
            };
            if items.send(item).await.is_err() || last {
                return;
            }
        }
    });
    Box::pin(Remote { received, wanted, asked: false })
}

/// The socket's side of `on_runtime`: asks for one item at a time.
struct Remote {
    received: tokio::sync::mpsc::Receiver<Response>,
    wanted: Arc<tokio::sync::Notify>,
    /// An item was asked for and has not arrived yet.
    asked: bool,
}

impl Stream for Remote {
    type Item = Response;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Response>> {
        if !self.asked {
            self.wanted.notify_one();
            self.asked = true;
        }
        let polled = self.received.poll_recv(cx);
        if matches!(polled, Poll::Ready(Some(_))) {
            self.asked = false;
        }
        polled
    }
}

/// One operation's stream on a websocket: the schema's execution, then, if it started a shared
/// subscription, that subscription's `Detached`.
enum SocketStream {
    /// The schema's execution, and where a shared subscription it starts leaves its state.
    Executing(BoxStream<'static, Response>, Handoff),
    /// A shared subscription after its execution (the handoff went with the execution: it
    /// would keep an allocation sized for a `Detached`).
    Detached(Detached),
    Ended,
}

impl Stream for SocketStream {
    type Item = Response;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Response>> {
        if let SocketStream::Executing(schema, handoff) = &mut *self {
            match schema.poll_next_unpin(cx) {
                // Everything the execution kept goes now; a shared subscription's state stays.
                Poll::Ready(None) => {
                    *self = handoff.take().map_or(SocketStream::Ended, |detached| {
                        detached.take_over();
                        SocketStream::Detached(detached)
                    });
                }
                other => return other,
            }
        }
        match &mut *self {
            SocketStream::Detached(detached) => detached.poll_next_unpin(cx),
            _ => Poll::Ready(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;

    use super::*;

    fn shape(query: &str) -> Option<LiveShape> {
        shape_of(&parse_query(query).expect("parses"), None)
    }

    #[test]
    fn subscriptions_of_one_shape_hold_one_shape_and_the_table_stays_bounded() {
        let shapes = SharedShapes::default();
        let running = shapes.intern(shape("subscription { likeCounts(ids: [\"a\"]) { likeCount } }").expect("shared"));
        // Another document, variables and target ids, the same selection: the same shape.
        let same = shapes
            .intern(shape("subscription S($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }").expect("shared"));
        assert!(Arc::ptr_eq(&running, &same));
        let aliased = shapes.intern(shape("subscription { likeCounts(ids: []) { n: likeCount } }").expect("shared"));
        assert!(!Arc::ptr_eq(&running, &aliased), "another response key is another shape");
        drop(aliased);
        // A client cycling through distinct selections leaves dead entries, swept as the
        // table doubles: it never holds many more than the shapes alive.
        for n in 0..1_000 {
            let query = format!("subscription {{ likeCounts(ids: []) {{ a{n}: likeCount }} }}");
            drop(shapes.intern(shape(&query).expect("shared")));
            assert!(shapes.len() <= SHAPES_BEFORE_SWEEP + 1, "{} entries after {n}", shapes.len());
        }
        let again = shapes.intern(shape("subscription { likeCounts(ids: [\"b\"]) { likeCount } }").expect("shared"));
        assert!(Arc::ptr_eq(&running, &again), "a running shape survives the sweeps");
    }

    #[test]
    fn like_fields_under_any_alias_or_fragment_are_shared() {
        let plain =
            shape("subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount likeVersion } }").expect("shared");
        assert_eq!(plain.root_key, "likeCounts");
        assert!(plain.fields.iter().all(|list| list.len() == 3));
        let fragments = shape(
            "subscription S($ids: [ID!]!) { live: likeCounts(ids: $ids) { __typename ... on Post { n: likeCount } \
             ...Comments } } fragment Comments on AnyComment { likeVersion }",
        )
        .expect("shared");
        assert_eq!(fragments.root_key, "live");
        assert_eq!(
            fragments.fields[POST],
            [("__typename".into(), SharedField::Typename), ("n".into(), SharedField::LikeCount)]
        );
        assert_eq!(
            fragments.fields[REPLY],
            [("__typename".into(), SharedField::Typename), ("likeVersion".into(), SharedField::LikeVersion)]
        );
        assert_ne!(plain.key, fragments.key);
    }

    #[test]
    fn viewer_fields_directives_and_other_roots_run_per_subscriber() {
        for query in [
            "subscription { likeCounts(ids: [\"x\"]) { likeCount ... on Post { likedByMe } } }",
            "subscription { likeCounts(ids: [\"x\"]) { likeCount ... on Post { title } } }",
            "subscription($show: Boolean!) { likeCounts(ids: [\"x\"]) { likeCount @include(if: $show) } }",
            "subscription { likeCounts(ids: [\"x\"]) @skip(if: false) { likeCount } }",
            "subscription { notifications { unreadCount } }",
            "subscription { likeCounts(ids: [\"x\"]) { ...F } } fragment F on Likeable { ...G } fragment G on Likeable { ...F }",
        ] {
            assert!(shape(query).is_none(), "{query}");
        }
    }

    #[test]
    fn the_operation_a_request_runs_is_found_by_its_name_or_alone() {
        use async_graphql::parser::types::OperationType;
        let ty = |query: &str, name: Option<&str>| {
            let document = parse_query(query).expect("parses");
            operation(&document, name).map(|o| o.ty)
        };
        assert_eq!(ty("subscription { notifications { unreadCount } }", None), Some(OperationType::Subscription));
        let two = "query Q { me { id } } subscription S { notifications { unreadCount } }";
        assert_eq!(ty(two, Some("S")), Some(OperationType::Subscription));
        assert_eq!(ty(two, Some("Q")), Some(OperationType::Query));
        assert_eq!(ty(two, None), None, "the schema refuses it: no operation named");
        assert_eq!(ty(two, Some("X")), None);
    }
}
