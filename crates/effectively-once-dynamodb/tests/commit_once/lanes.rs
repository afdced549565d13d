//! Lanes in `commit_batch` against DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`): members of
//! one lane (a Kafka partition) in different groups (accounts) take effect in batch order. A
//! later member is never committed while an earlier one of its lane is undecided, neither by the
//! round after a cancellation nor by another transaction of the same round, and it is committed
//! once the earlier one is decided. Members the caller answered before the batch hold back the
//! same way, and a call cut before it answered is read first when it comes again.

use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Error, ErrorChain, ErrorKind, Idempotency, Key, Outcome, Retry};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_dynamodb::{
    create_table, BatchWrites, CommitOnce, DynamoDbStore, Fallback, Member, Otherwise, RequestCounter, Table, Tx,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Answer {
    /// Its writes applied.
    Applied,
    /// Its stock was short: refused, recorded with a `refused#` row.
    Refused,
    /// It found the `refused#` row of the member it checks: it ran after that one was decided.
    AfterRefusal,
}

#[derive(Serialize)]
struct Id<'a> {
    id: &'a str,
}

/// What a member's writes need besides its `done#` row.
#[derive(Clone, Copy)]
enum Needs {
    Nothing,
    /// Takes one unit of `stock#<its id>`; short of it, refused when `refusable`, else its
    /// condition fails with no answer (no verdict on the message: delivered again).
    Stock {
        refusable: bool,
    },
    /// Checks that the member `0` was not refused yet: answers `AfterRefusal` when it was,
    /// so its answer says whether it ran before or after that member was decided.
    NotRefused(&'static str),
}

/// The members' writes, in a table of the test's own.
struct Writes {
    table: Table,
    members: Vec<(String, Needs)>,
}

impl BatchWrites<Answer> for Writes {
    fn writes(&self, index: usize, tx: &mut Tx<Answer>) -> Result<Answer, Error> {
        let (id, needs) = &self.members[index];
        match *needs {
            Needs::Nothing => {}
            Needs::Stock { refusable } => {
                let take = tx.update(&self.table, &Id { id: &format!("stock#{id}") }, |u| {
                    u.update_expression("SET #a = #a - :one")
                        .condition_expression("#a >= :one")
                        .expression_attribute_names("#a", "available")
                        .expression_attribute_values(":one", AttributeValue::N("1".into()))
                })?;
                if refusable {
                    let (table, refused) = (self.table.clone(), format!("refused#{id}"));
                    tx.otherwise(take, move |_| Otherwise::AnswerWith {
                        answer: Answer::Refused,
                        fallback: Fallback::new().put(&table, &Id { id: &refused }),
                    });
                }
            }
            Needs::NotRefused(other) => {
                let check = tx.check(&self.table, &Id { id: &format!("refused#{other}") }, |c| {
                    c.condition_expression("attribute_not_exists(id)")
                })?;
                tx.otherwise(check, |_| Otherwise::Answer(Answer::AfterRefusal));
            }
        }
        tx.put(&self.table, &Id { id: &format!("done#{id}") })?;
        Ok(Answer::Applied)
    }
}

/// One member's spec: its id, its group (account), its lane if any, and what its writes need.
type Spec = (String, &'static str, Option<&'static str>, Needs);

/// A store with its request counter, a table of the test's own, and the writes of `specs`.
async fn setup(specs: &[Spec]) -> (Idempotency<DynamoDbStore>, RequestCounter, Writes) {
    let (store, counter) = fresh_store().await;
    let name = unique_name("lanes");
    create_table(store.client(), &name).await.expect("the test's table");
    let members = specs.iter().map(|(id, _, _, needs)| (id.clone(), *needs)).collect();
    let writes = Writes { table: Table::new(name, "id"), members };
    (Idempotency::new(store, Config::default()), counter, writes)
}

fn members(specs: &[Spec]) -> Vec<Member<'_, str>> {
    specs
        .iter()
        .map(|(id, group, lane, _)| {
            let member = Member::new(Key::new("orders", id).unwrap(), id.as_str()).in_group(*group);
            match lane {
                Some(lane) => member.in_lane(*lane),
                None => member,
            }
        })
        .collect()
}

async fn stock(idempotency: &Idempotency<DynamoDbStore>, writes: &Writes, id: &str, available: i64) {
    let item =
        [("id", AttributeValue::S(format!("stock#{id}"))), ("available", AttributeValue::N(available.to_string()))];
    let client = idempotency.store().client();
    let put = client.put_item().table_name(writes.table.name());
    put.set_item(Some(item.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())).send().await.unwrap();
}

async fn done(idempotency: &Idempotency<DynamoDbStore>, writes: &Writes, id: &str) -> bool {
    let client = idempotency.store().client();
    let get = client.get_item().table_name(writes.table.name()).key("id", AttributeValue::S(format!("done#{id}")));
    get.consistent_read(true).send().await.unwrap().item.is_some()
}

fn transactions(counter: &RequestCounter) -> u64 {
    counter.by_operation().get("TransactWriteItems").copied().unwrap_or(0)
}

/// Asserts `result` is a hold-back: not started, to be retried now.
fn assert_held_back(result: &Result<Outcome<Answer>, Error>) {
    let error = result.as_ref().expect_err("held back");
    let chain = ErrorChain(error).to_string();
    assert_eq!(error.retry(), Retry::Now, "{chain}");
    assert!(chain.contains("not started, an earlier event of its group"), "{chain}");
}

/// The earlier member of a lane (account A) fails its condition with no answer: it is delivered
/// again, so the later member of its lane (account B, no write in common) is held back, not
/// committed in the round after the cancellation. Once stock arrives, both commit, in one
/// transaction.
#[tokio::test]
async fn a_lane_later_member_of_another_group_waits_for_an_undecided_earlier_one() {
    let specs: Vec<Spec> = vec![
        ("e".into(), "A", Some("p0"), Needs::Stock { refusable: false }),
        ("l".into(), "B", Some("p0"), Needs::Nothing),
    ];
    let (idempotency, counter, writes) = setup(&specs).await;
    stock(&idempotency, &writes, "e", 0).await;
    counter.reset();
    let results = idempotency.commit_batch(&members(&specs), &writes).await;
    assert_eq!(results[0].as_ref().unwrap_err().kind(), ErrorKind::ConditionFailed);
    assert_held_back(&results[1]);
    assert!(!done(&idempotency, &writes, "l").await, "the later member did not overtake the earlier one");
    assert_eq!(transactions(&counter), 2, "the batch, cancelled, and the earlier member alone");

    stock(&idempotency, &writes, "e", 1).await;
    counter.reset();
    let again = idempotency.commit_batch(&members(&specs), &writes).await;
    assert_eq!(again.into_iter().map(Result::unwrap).collect::<Vec<_>>(), vec![Outcome::Fresh(Answer::Applied); 2]);
    assert!(done(&idempotency, &writes, "e").await && done(&idempotency, &writes, "l").await);
    assert_eq!(transactions(&counter), 1);
}

/// The earlier member of a lane is refused (a verdict: decided, recorded): the later one, of
/// another group, is committed in the same call, after it, as it sees the refusal's row. (Sent
/// again in the round after the cancellation it would run before the refusal was recorded.)
#[tokio::test]
async fn a_lane_later_member_of_another_group_commits_after_an_earlier_refusal() {
    let specs: Vec<Spec> = vec![
        ("e".into(), "A", Some("p0"), Needs::Stock { refusable: true }),
        ("l".into(), "B", Some("p0"), Needs::NotRefused("e")),
    ];
    let (idempotency, _, writes) = setup(&specs).await;
    stock(&idempotency, &writes, "e", 0).await;
    let results = idempotency.commit_batch(&members(&specs), &writes).await;
    let results: Vec<Outcome<Answer>> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(results, vec![Outcome::Fresh(Answer::Refused), Outcome::Fresh(Answer::AfterRefusal)]);
}

/// Two groups too large for one transaction together, joined by a lane whose earlier member (in
/// the group that comes second) fails with no answer: sent as two transactions of one round,
/// the first would commit the lane's later member while the second is cancelled. As one unit,
/// cut in batch order, it is held back instead; every other member commits.
#[tokio::test]
async fn a_lane_across_transactions_holds_its_later_member_behind_an_undecided_earlier_one() {
    let mut specs: Vec<Spec> = (0..30).map(|at| (format!("b{at}"), "B", None, Needs::Nothing)).collect();
    specs.extend((0..29).map(|at| (format!("a{at}"), "A", None, Needs::Nothing)));
    specs.push(("e".into(), "A", Some("p0"), Needs::Stock { refusable: false }));
    specs.push(("l".into(), "B", Some("p0"), Needs::Nothing));
    let (idempotency, counter, writes) = setup(&specs).await;
    stock(&idempotency, &writes, "e", 0).await;
    counter.reset();
    let results = idempotency.commit_batch(&members(&specs), &writes).await;
    let (e, l) = (specs.len() - 2, specs.len() - 1);
    for (at, result) in results.iter().enumerate().take(e) {
        assert_eq!(result.as_ref().unwrap(), &Outcome::Fresh(Answer::Applied), "member {at}");
    }
    assert_eq!(results[e].as_ref().unwrap_err().kind(), ErrorKind::ConditionFailed);
    assert_held_back(&results[l]);
    assert!(!done(&idempotency, &writes, "l").await);
    // The first 49 in batch order (98 actions); the rest, cancelled by the earlier member; the
    // rest again without it; the earlier member alone.
    assert_eq!(transactions(&counter), 4);
}

/// A copy of an event (same key, same payload) in another lane than its first's, as a producer
/// retry lands in another partition: when the first ends undecided, the copy is not answered
/// with it in the same pass, so its lane's later member (another group) is held back behind
/// it, not committed past it.
#[tokio::test]
async fn a_copy_in_another_lane_holds_its_lane_when_its_first_is_undecided() {
    let specs: Vec<Spec> = vec![
        ("e".into(), "A", Some("p0"), Needs::Stock { refusable: false }),
        ("e".into(), "A", Some("p1"), Needs::Stock { refusable: false }),
        ("l".into(), "B", Some("p1"), Needs::Nothing),
    ];
    let (idempotency, _counter, writes) = setup(&specs).await;
    stock(&idempotency, &writes, "e", 0).await;
    let results = idempotency.commit_batch(&members(&specs), &writes).await;
    assert_eq!(results[0].as_ref().unwrap_err().kind(), ErrorKind::ConditionFailed);
    let copy = results[1].as_ref().expect_err("the copy is not decided either");
    assert_eq!(copy.retry(), Retry::Now, "{}", ErrorChain(copy));
    assert_held_back(&results[2]);
    assert!(!done(&idempotency, &writes, "l").await, "the lane's later member did not pass the copy");

    stock(&idempotency, &writes, "e", 1).await;
    let again = idempotency.commit_batch(&members(&specs), &writes).await;
    assert!(matches!(again[0], Ok(Outcome::Fresh(Answer::Applied))), "{:?}", again[0]);
    assert!(matches!(again[1], Ok(Outcome::Replayed(_))), "the copy replays the first: {:?}", again[1]);
    assert!(matches!(again[2], Ok(Outcome::Fresh(Answer::Applied))), "{:?}", again[2]);
}

/// Members the caller answered before the batch (`commit_batch_with_answers`): a failure with no
/// verdict on the message holds back its key's and lane's later members (a replay among them),
/// not its group's in another lane; an answer is returned as given, with no request of its own.
#[tokio::test]
async fn a_member_answered_before_the_batch_holds_its_key_and_lane_not_its_group_elsewhere() {
    let specs: Vec<Spec> = vec![
        ("f".into(), "A", Some("p0"), Needs::Nothing),
        ("l".into(), "B", Some("p0"), Needs::Nothing),
        ("r".into(), "C", Some("p0"), Needs::Nothing),
        ("f".into(), "D", Some("p2"), Needs::Nothing),
        ("o".into(), "A", Some("p1"), Needs::Nothing),
        ("g".into(), "E", Some("p3"), Needs::Nothing),
        ("v".into(), "F", Some("p4"), Needs::Nothing),
        ("w".into(), "F", Some("p4"), Needs::Nothing),
    ];
    let (idempotency, counter, writes) = setup(&specs).await;
    let retryable = effectively_once::StoreError::new(effectively_once::StoreErrorKind::Misconfigured, "no table yet");
    let answers = vec![
        Some(Err(retryable.into())),
        None,
        Some(Ok(Outcome::Replayed(Answer::Applied))),
        None,
        None,
        Some(Ok(Outcome::Replayed(Answer::Refused))),
        // A verdict on the message (key reuse): answered for good, it holds nothing back.
        Some(Err(Error::key_reused("orders#v"))),
        None,
    ];
    counter.reset();
    let results = idempotency.commit_batch_with_answers(&members(&specs), answers, &writes).await;
    assert_eq!(counter.total(), 1, "one transaction, for the members not answered or held");
    let given = results[0].as_ref().expect_err("its own failure");
    assert!(ErrorChain(given).to_string().contains("no table yet"), "{}", ErrorChain(given));
    for held in [1, 2, 3] {
        assert_held_back(&results[held]);
    }
    assert_eq!(results[4].as_ref().unwrap(), &Outcome::Fresh(Answer::Applied), "its group in another lane goes on");
    assert_eq!(results[5].as_ref().unwrap(), &Outcome::Replayed(Answer::Refused), "an answer as given");
    assert_eq!(results[6].as_ref().unwrap_err().kind(), ErrorKind::KeyReused, "as given");
    assert_eq!(results[7].as_ref().unwrap(), &Outcome::Fresh(Answer::Applied), "not held behind a verdict");
    assert!(done(&idempotency, &writes, "o").await && done(&idempotency, &writes, "w").await);
    for id in ["f", "l", "r", "g"] {
        assert!(!done(&idempotency, &writes, id).await, "{id} was not sent");
    }
}

/// Holds `id`'s key in progress for another owner, with the payload its member carries.
async fn hold_in_progress(idempotency: &Idempotency<DynamoDbStore>, id: &str) {
    use effectively_once::Store;
    let now_ms = idempotency.config().now_ms();
    let hash = idempotency.config().payload_hash(id).unwrap();
    let key = Key::new("orders", id).unwrap();
    let record = effectively_once::Record::in_progress(
        key.as_str(),
        hash.as_str(),
        "elsewhere",
        now_ms + 3_600_000,
        now_ms / 1000 + 86_400,
    );
    idempotency.store().claim(&record, now_ms).await.expect("claimed");
}

/// A record in progress elsewhere holds what the transaction's cancellation makes it hold, its
/// group in every lane among them, whether a read first finds it or the transaction does: the
/// answers do not depend on a read (the same batch, read first or not, answers the same).
#[tokio::test]
async fn a_record_in_progress_elsewhere_holds_the_same_read_first_or_not() {
    let specs: Vec<Spec> =
        vec![("m0".into(), "A", Some("p0"), Needs::Nothing), ("m1".into(), "A", Some("p1"), Needs::Nothing)];
    let mut answers = Vec::new();
    for read_first in [false, true] {
        let (idempotency, _, writes) = setup(&specs).await;
        hold_in_progress(&idempotency, "m0").await;
        let batch: Vec<Member<'_, str>> = (members(&specs).into_iter().enumerate())
            .map(|(at, member)| if read_first && at == 0 { member.read_first() } else { member })
            .collect();
        let results = idempotency.commit_batch(&batch, &writes).await;
        assert_eq!(results[0].as_ref().unwrap_err().kind(), ErrorKind::InProgress, "read first: {read_first}");
        let m1 = match &results[1] {
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => format!("{:?} {}", error.retry(), ErrorChain(error)),
        };
        answers.push((m1, done(&idempotency, &writes, "m1").await));
    }
    assert_eq!(answers[0], answers[1], "[not read first, read first]");
    assert!(!answers[0].1, "m1 waits behind its group's member in progress: {answers:?}");
}

/// A `commit_batch` dropped before it answered (a driver cutting its call at the deadline) may
/// have committed: delivered again, its members' records are read first (one `BatchGetItem`),
/// and what did commit is answered from the read, with no transaction; once, as then the
/// store knows. A member marked `read_first` is read the same way.
#[tokio::test]
async fn a_commit_cut_before_it_answers_is_read_first_when_it_comes_again() {
    let specs: Vec<Spec> = ["a", "b", "c"].iter().map(|id| (id.to_string(), "A", None, Needs::Nothing)).collect();
    let (idempotency, counter, writes) = setup(&specs).await;
    let all_fresh = idempotency.commit_batch(&members(&specs[..2]), &writes).await;
    assert!(all_fresh.iter().all(|r| matches!(r, Ok(Outcome::Fresh(_)))), "{all_fresh:?}");
    // The call that committed `a` and `b` again, cut after its first poll: its answer is lost.
    let all = members(&specs);
    let cut = idempotency.commit_batch::<_, Answer, _>(&all, &writes);
    let mut cut = Box::pin(cut);
    std::future::poll_fn(|cx| {
        assert!(cut.as_mut().poll(cx).is_pending(), "cut before it answers");
        std::task::Poll::Ready(())
    })
    .await;
    drop(cut);
    drop(all);
    counter.reset();
    let again = idempotency.commit_batch(&members(&specs), &writes).await;
    let answers: Vec<Outcome<Answer>> = again.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        answers,
        [Outcome::Replayed(Answer::Applied), Outcome::Replayed(Answer::Applied), Outcome::Fresh(Answer::Applied)]
    );
    let read = |counter: &RequestCounter| counter.by_operation().get("BatchGetItem").copied().unwrap_or(0);
    assert_eq!((read(&counter), transactions(&counter)), (1, 1), "one read, one transaction for `c` alone");
    // Read once: the next delivery sends its transaction, cancelled by the duplicates.
    counter.reset();
    idempotency.commit_batch::<_, Answer, _>(&members(&specs), &writes).await;
    assert_eq!(read(&counter), 0, "not read again");
    // Marked by the caller: read first, answered with no write.
    counter.reset();
    let marked: Vec<Member<'_, str>> = members(&specs).into_iter().map(Member::read_first).collect();
    let replays = idempotency.commit_batch::<_, Answer, _>(&marked, &writes).await;
    assert!(replays.iter().all(|r| matches!(r, Ok(Outcome::Replayed(_)))), "{replays:?}");
    assert_eq!((read(&counter), transactions(&counter)), (1, 0));
}

/// A payload that cannot be serialised, so it cannot be hashed.
#[derive(Debug)]
enum Payload {
    Order(&'static str),
    Unhashable,
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Order(id) => serializer.serialize_str(id),
            Payload::Unhashable => Err(serde::ser::Error::custom("no canonical form")),
        }
    }
}

/// A member whose payload does not hash fails with no verdict on the message (the payload may
/// hash under a fixed build): its group's later members are held back, another group goes on.
#[tokio::test]
async fn a_member_that_does_not_hash_holds_back_its_groups_later_members() {
    let specs: Vec<Spec> =
        ["u", "after", "other"].iter().map(|id| (id.to_string(), "A", None, Needs::Nothing)).collect();
    let (idempotency, _, writes) = setup(&specs).await;
    let payloads = [Payload::Unhashable, Payload::Order("after"), Payload::Order("other")];
    let members: Vec<Member<'_, Payload>> = specs
        .iter()
        .zip(&payloads)
        .zip(["A", "A", "B"])
        .map(|(((id, ..), payload), group)| Member::new(Key::new("orders", id).unwrap(), payload).in_group(group))
        .collect();
    let results = idempotency.commit_batch(&members, &writes).await;
    let unhashed = results[0].as_ref().expect_err("no hash");
    assert_eq!(unhashed.retry(), Retry::AfterFix, "{}", ErrorChain(unhashed));
    assert_held_back(&results[1]);
    assert_eq!(results[2].as_ref().unwrap(), &Outcome::Fresh(Answer::Applied));
    assert!(!done(&idempotency, &writes, "after").await && done(&idempotency, &writes, "other").await);
}

/// A replay the caller answered, behind a member of its lane whose payload does not hash, is
/// held back with the lane: a trigger that stops at a lane's first failure hears of nothing
/// after it, as for a member answered before a failure in a transaction.
#[tokio::test]
async fn an_answered_member_behind_one_that_does_not_hash_is_held_back() {
    let specs: Vec<Spec> = ["u", "after"].iter().map(|id| (id.to_string(), "A", Some("p0"), Needs::Nothing)).collect();
    let (idempotency, counter, writes) = setup(&specs).await;
    let payloads = [Payload::Unhashable, Payload::Order("after")];
    let members: Vec<Member<'_, Payload>> = specs
        .iter()
        .zip(&payloads)
        .map(|((id, group, lane, _), payload)| {
            Member::new(Key::new("orders", id).unwrap(), payload).in_group(*group).in_lane(lane.unwrap())
        })
        .collect();
    let answers = vec![None, Some(Ok(Outcome::Replayed(Answer::Applied)))];
    counter.reset();
    let results = idempotency.commit_batch_with_answers(&members, answers, &writes).await;
    let unhashed = results[0].as_ref().expect_err("no hash");
    assert_eq!(unhashed.kind(), ErrorKind::Serialization, "{}", ErrorChain(unhashed));
    assert_held_back(&results[1]);
    assert_eq!(counter.total(), 0, "nothing to send");
}
