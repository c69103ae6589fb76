//! A view re-ranked in place (a vote that raises an answer in a view ordered by votes: one
//! pipeline update of the parent, with the answer's copy made here) holds what a recompute of
//! it would, in both write modes, alone and in groups: never a child the recompute leaves out
//! (one another program stored with a sort key of the wrong type, one too large to embed), and
//! never a copy that differs from the child (a patch of an array element, a decimal
//! incremented by a double, new fields), which such patches then change by operators or a
//! recompute instead.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use serde::{Deserialize, Serialize};
use std::future::IntoFuture;
use std::time::Duration;
use subset::bson;
use subset::raw::ChildPatch;

use subset::{Child, Store, StoreOptions, Subset, WriteMode};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Answer {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
    helpful: i32,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    weight: Bson,
    #[serde(default)]
    body: String,
}

/// Two views of the answers, both of two: the most helpful, and the latest.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "reranked_questions")]
struct Question {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reranked_answers",
        key = "question_id",
        keep = 2,
        sort = "helpful desc, date desc",
        count = "answers"
    )]
    top: Vec<Answer>,
    #[subset(
        child = "reranked_answers",
        key = "question_id",
        keep = 2,
        sort = "date desc"
    )]
    latest: Vec<Answer>,
    #[serde(default)]
    answers: i64,
}

/// A question with three answers, the later the more helpful.
async fn question(store: &Store<Question>) -> (ObjectId, Vec<Answer>) {
    store.ensure_indexes().await.unwrap();
    let q = Question {
        id: ObjectId::new(),
        top: Vec::new(),
        latest: Vec::new(),
        answers: 0,
    };
    store.insert(&q).await.unwrap();
    let answers: Vec<Answer> = (1..=3)
        .map(|i| Answer {
            id: ObjectId::new(),
            date: DateTime::from_millis(1_000 * i64::from(i)),
            helpful: 10 * i,
            tags: vec!["a".into(), "b".into()],
            weight: Bson::Int32(1),
            body: String::new(),
        })
        .collect();
    let top = store.children(Question::TOP);
    top.push_many(&q.id, &answers).await.unwrap();
    (q.id, answers)
}

/// Stores `answer` in `collection` around the library, as another program would.
async fn stored_around<P: Subset>(store: &Store<P>, collection: &str, answer: Document) {
    store
        .database()
        .collection::<Document>(collection)
        .insert_one(answer)
        .await
        .unwrap();
}

async fn raw<P: Subset>(store: &Store<P>, collection: &str, id: ObjectId) -> Document {
    store
        .database()
        .collection::<Document>(collection)
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
}

/// The `_id`s of the view `field` as stored.
fn held(parent: &Document, field: &str) -> Vec<ObjectId> {
    parent
        .get_array(field)
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().get_object_id("_id").unwrap())
        .collect()
}

/// Both views are what a reconcile would write, and the question reads.
async fn assert_exact(store: &Store<Question>, id: &ObjectId, context: &str) {
    for field in [Question::TOP, Question::LATEST] {
        let drift = store.children(field).check(id).await.unwrap();
        assert!(drift.is_in_sync(), "{context}: {drift:?}");
    }
    if let Err(e) = store.get(id).await {
        panic!("{context}: the question no longer reads: {e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_never_ranks_in_a_child_the_view_leaves_out() {
    for store in common::stores::<Question>().await {
        let mode = store.mode().await.unwrap();
        let (id, _) = question(&store).await;
        // A date stored as a string: no view embeds it, and reads never meet it.
        let odd = ObjectId::new();
        stored_around(
            &store,
            "reranked_answers",
            doc! { "_id": odd, "question_id": id, "date": "2024", "helpful": 0 },
        )
        .await;
        for field in [Question::TOP, Question::LATEST] {
            store.children(field).reconcile(&id).await.unwrap();
        }
        // Raised past every answer: the view is full, so a re-rank in place would take it in.
        let top = store.children(Question::TOP);
        top.patch(&id, &odd)
            .inc(Answer::HELPFUL, 100)
            .await
            .unwrap();
        let child = raw(&store, "reranked_answers", odd).await;
        assert_eq!(
            child.get_i32("helpful").ok(),
            Some(100),
            "{mode:?}: the vote counts"
        );
        let parent = raw(&store, "reranked_questions", id).await;
        assert!(!held(&parent, "top").contains(&odd), "{mode:?}: {parent}");
        assert_exact(&store, &id, &format!("{mode:?}")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_on_a_child_too_large_for_the_view_counts_and_leaves_it_out() {
    let _big = crate::BIG_DOCUMENTS.lock().await;
    for store in common::stores::<Question>().await {
        let mode = store.mode().await.unwrap();
        let (id, _) = question(&store).await;
        // The latest answer, of 9 MiB: the view by date holds it, the one by votes, which it
        // would enter with a vote, cannot hold it as well (16 MiB in all).
        let big = ObjectId::new();
        stored_around(
            &store,
            "reranked_answers",
            doc! {
                "_id": big, "question_id": id, "date": DateTime::from_millis(9_000),
                "helpful": 0, "body": "x".repeat(9 * 1024 * 1024),
            },
        )
        .await;
        for field in [Question::LATEST, Question::TOP] {
            store.children(field).reconcile(&id).await.unwrap();
        }
        let before = raw(&store, "reranked_questions", id).await;
        assert_eq!(held(&before, "latest")[0], big, "{mode:?}");
        let top = store.children(Question::TOP);
        top.patch(&id, &big)
            .inc(Answer::HELPFUL, 100)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: a vote on it is refused: {e}"));
        let child = raw(&store, "reranked_answers", big).await;
        assert_eq!(child.get_i32("helpful").ok(), Some(100), "{mode:?}");
        let parent = raw(&store, "reranked_questions", id).await;
        assert!(!held(&parent, "top").contains(&big), "{mode:?}");
        assert_eq!(held(&parent, "latest")[0], big, "{mode:?}");
        // Every later vote on it counts too.
        top.patch(&id, &big).inc(Answer::HELPFUL, 1).await.unwrap();
        let child = raw(&store, "reranked_answers", big).await;
        assert_eq!(child.get_i32("helpful").ok(), Some(101), "{mode:?}");
        let drift = top.check(&id).await.unwrap();
        assert!(drift.is_in_sync(), "{mode:?}: {drift:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raising_patch_leaves_copies_that_are_the_child_field_for_field() {
    let decimal = |s: &str| Bson::Decimal128(s.parse().unwrap());
    // Each raises the most helpful answer's votes with something else. Where a copy made here
    // would differ from the child, the views take the patch by operators instead of the
    // re-rank's pipeline update: an array element (a field of a document here), names that
    // start with a digit (ordered by length first by the server), a decimal with a double
    // (converted by the server first), a decimal sum equal to the old value (kept as it was).
    // New fields (added by name) and an `$unset` of a path that is not there (which makes
    // nothing) are re-ranked in place.
    let vote = || ChildPatch::new().inc("helpful", 1);
    let int = Bson::Int32(1);
    let patches = [
        ("a vote", int.clone(), vote(), true),
        (
            "new fields",
            int.clone(),
            vote().set("zeta", 1).set("alpha", 2),
            true,
        ),
        (
            "an unset of nothing",
            int.clone(),
            vote().unset("meta.flag"),
            true,
        ),
        (
            "an array element",
            int.clone(),
            vote().set("tags.0", "z"),
            false,
        ),
        (
            "digit names",
            int.clone(),
            vote().set("9lives", 1).set("10x", 1),
            false,
        ),
        (
            "a decimal plus a double",
            decimal("1.5"),
            vote().inc("weight", 0.25),
            false,
        ),
        (
            "a double plus a decimal",
            Bson::Double(1.5),
            vote().inc("weight", decimal("0.25")),
            false,
        ),
        (
            "a decimal plus nothing",
            decimal("1.5"),
            vote().inc("weight", decimal("0.00")),
            false,
        ),
    ];
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (db, log) = common::recorded_replica_db().await;
        let store = Store::<Question>::with_options(&db, StoreOptions::new().mode(mode));
        for (what, weight, patch, reranked) in &patches {
            let context = format!("{mode:?}, {what}");
            let (id, answers) = question(&store).await;
            let best = answers[2].id;
            store
                .database()
                .collection::<Document>("reranked_answers")
                .update_one(
                    doc! { "_id": best },
                    doc! { "$set": { "weight": weight.clone() } },
                )
                .await
                .unwrap();
            for field in [Question::TOP, Question::LATEST] {
                store.children(field).reconcile(&id).await.unwrap();
            }
            log.lock().unwrap().clear();
            let raw_top = store.children(Question::TOP).raw();
            raw_top
                .patch(&Bson::ObjectId(id), &Bson::ObjectId(best), patch)
                .await
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            // An update of the question whose statement is a pipeline that sorts an array:
            // the re-rank (a lease given back apart is a pipeline too).
            let pipelined = log.lock().unwrap().iter().any(|(name, target, command)| {
                let pipeline = |s: &Bson| {
                    let update = s.as_document().and_then(|d| d.get("u"));
                    matches!(update, Some(Bson::Array(stages)) if format!("{stages:?}").contains("$sortArray"))
                };
                name == "update"
                    && target == "reranked_questions"
                    && command
                        .get_array("updates")
                        .is_ok_and(|u| u.iter().any(pipeline))
            });
            assert_eq!(pipelined, *reranked, "{context}: re-ranked in place");
            let mut child = raw(&store, "reranked_answers", best).await;
            child.remove("question_id");
            let parent = raw(&store, "reranked_questions", id).await;
            for field in ["top", "latest"] {
                let copy = parent
                    .get_array(field)
                    .unwrap()
                    .iter()
                    .map(|c| c.as_document().unwrap())
                    .find(|c| c.get_object_id("_id").ok() == Some(best))
                    .unwrap_or_else(|| panic!("{context}: no copy in {field}"));
                // Field for field, in the child's order.
                let fields = |d: &Document| -> Vec<(String, Bson)> {
                    d.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                };
                assert_eq!(fields(copy), fields(&child), "{context}: {field}");
            }
            assert_exact(&store, &id, &context).await;
        }
    }
}

/// The most helpful answers alone: a vote on such a question may ride in a group with votes
/// on other questions (a view by date showing the votes would keep them apart).
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "ranked_only_questions")]
struct RankedOnly {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "ranked_only_answers",
        key = "question_id",
        keep = 2,
        sort = "helpful desc, date desc"
    )]
    top: Vec<Answer>,
}

/// Votes on sixteen questions at once ride in groups, each view re-ranked in place by the
/// group's update of the questions; the vote on an answer the view leaves out (a date stored
/// as a string) cannot, and goes alone (in transactions the whole group then goes alone): it
/// counts, and the view never takes that answer in. Without transactions the others still
/// share their writes.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_votes_never_ranks_in_a_child_the_view_leaves_out() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (db, log) = common::recorded_replica_db().await;
        let store = Store::<RankedOnly>::with_options(&db, StoreOptions::new().mode(mode));
        store.ensure_indexes().await.unwrap();
        let top = store.children(RankedOnly::TOP);
        let mut asked = Vec::new();
        for _ in 0..16 {
            let id = ObjectId::new();
            let question = RankedOnly {
                id,
                top: Vec::new(),
            };
            store.insert(&question).await.unwrap();
            let answers: Vec<ObjectId> = (1..=3).map(|_| ObjectId::new()).collect();
            let stored: Vec<Answer> = answers
                .iter()
                .zip(1..)
                .map(|(answer, i)| Answer {
                    id: *answer,
                    date: DateTime::from_millis(1_000 * i64::from(i)),
                    helpful: 10 * i,
                    tags: Vec::new(),
                    weight: Bson::Int32(1),
                    body: String::new(),
                })
                .collect();
            top.push_many(&id, &stored).await.unwrap();
            asked.push((id, answers[0]));
        }
        // One question's vote is on an answer with a date stored as a string.
        let (odd_question, odd) = (asked[5].0, ObjectId::new());
        asked[5].1 = odd;
        stored_around(
            &store,
            "ranked_only_answers",
            doc! { "_id": odd, "question_id": odd_question, "date": "2024", "helpful": 0 },
        )
        .await;
        top.reconcile(&odd_question).await.unwrap();
        // The least helpful answer of each question rises to the top (the odd one with them);
        // grouping is asked of one of three rounds.
        let mut rounds = 0;
        let mut grouped = false;
        while rounds < 3 && !grouped {
            rounds += 1;
            log.lock().unwrap().clear();
            let votes = asked.iter().map(|(id, answer)| {
                IntoFuture::into_future(top.patch(id, answer).inc(Answer::HELPFUL, 100))
            });
            for voted in futures::future::join_all(votes).await {
                voted.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            }
            // An update of several questions at once: a group.
            grouped = log.lock().unwrap().iter().any(|(name, target, command)| {
                name == "update"
                    && target == "ranked_only_questions"
                    && command.get_array("updates").is_ok_and(|u| u.len() > 1)
            });
            for (id, _) in &asked {
                let drift = top.check(id).await.unwrap();
                assert!(drift.is_in_sync(), "{mode:?}, round {rounds}: {drift:?}");
                store
                    .get(id)
                    .await
                    .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            }
            let parent = raw(&store, "ranked_only_questions", odd_question).await;
            assert!(!held(&parent, "top").contains(&odd), "{mode:?}: {parent}");
        }
        if mode == WriteMode::Ordered {
            assert!(grouped, "{mode:?}: no group in {rounds} rounds");
        }
        for (i, (id, answer)) in asked.iter().enumerate() {
            let voted = raw(&store, "ranked_only_answers", *answer).await;
            let expected = if i == 5 {
                100 * rounds
            } else {
                10 + 100 * rounds
            };
            assert_eq!(
                voted.get_i32("helpful").ok(),
                Some(expected),
                "{mode:?}: question {id}"
            );
        }
    }
}

/// Two patches of one answer that cannot compose (a vote that sets the tags, then one that
/// sets a tag) queued together on one question: the first re-ranks its copy in, the second
/// cannot make an exact copy, and the views are recomputed rather than left with the first
/// patch's copy, in both modes.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_patches_one_child_twice_leaves_its_copies_as_the_child() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in common::stores::<Question>().await {
        let mode = store.mode().await.unwrap();
        let (id, answers) = question(&store).await;
        let app = format!("reranks-{}", ObjectId::new().to_hex());
        let own = crate::mutations::on_own_client(&store, &app).await;
        let raw_top = own.children(Question::TOP).raw();
        let (q, weakest, other) = (
            Bson::ObjectId(id),
            Bson::ObjectId(answers[0].id),
            Bson::ObjectId(answers[1].id),
        );
        let first = ChildPatch::new().inc("helpful", 1);
        let vote = ChildPatch::new()
            .inc("helpful", 100)
            .set("tags", vec!["p", "q"]);
        let tag = ChildPatch::new().set("tags.0", "z");
        // The first patch's first command is held, so that the other two queue behind it
        // and go as one run.
        crate::mutations::hold_next_for(&own, &app, "findAndModify", Duration::from_millis(300))
            .await;
        let first = IntoFuture::into_future(raw_top.patch(&q, &other, &first));
        let queued = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            futures::join!(
                IntoFuture::into_future(raw_top.patch(&q, &weakest, &vote)),
                IntoFuture::into_future(raw_top.patch(&q, &weakest, &tag))
            )
        };
        let (firsts, (voted, tagged)) = futures::join!(first, queued);
        crate::mutations::release(&own).await;
        for result in [firsts, voted, tagged] {
            result.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
        let child = raw(&store, "reranked_answers", answers[0].id).await;
        assert_eq!(
            child.get_array("tags").ok().map(Vec::len),
            Some(2),
            "{mode:?}"
        );
        assert_eq!(
            child.get_array("tags").unwrap()[0],
            Bson::String("z".into()),
            "{mode:?}: {child}"
        );
        let parent = raw(&store, "reranked_questions", id).await;
        assert_eq!(held(&parent, "top")[0], answers[0].id, "{mode:?}: {parent}");
        assert_exact(&store, &id, &format!("{mode:?}")).await;
    }
}

/// A question within 16 KiB of MongoDB's limit (another program stored a large field in it):
/// a vote's re-rank in place misses there, and the views are recomputed, which keep the room a
/// recompute keeps, as `check` computes them, in both modes.
#[tokio::test(flavor = "multi_thread")]
async fn a_parent_near_the_limit_is_recomputed_rather_than_re_ranked() {
    let _big = crate::BIG_DOCUMENTS.lock().await;
    for store in common::stores::<Question>().await {
        let mode = store.mode().await.unwrap();
        let (id, answers) = question(&store).await;
        let pad = "x".repeat(16 * 1024 * 1024 - 12 * 1024);
        let questions = store
            .database()
            .collection::<Document>("reranked_questions");
        common::while_cache_full(|| {
            let set = doc! { "$set": { "pad": pad.clone() } };
            std::future::IntoFuture::into_future(questions.update_one(doc! { "_id": id }, set))
        })
        .await
        .unwrap();
        // The most helpful answer rises further: a re-rank in place of the view it leads.
        let top = store.children(Question::TOP);
        top.patch(&id, &answers[2].id)
            .inc(Answer::HELPFUL, 1)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let child = raw(&store, "reranked_answers", answers[2].id).await;
        assert_eq!(child.get_i32("helpful").ok(), Some(31), "{mode:?}");
        for field in [Question::TOP, Question::LATEST] {
            let drift = store.children(field).check(&id).await.unwrap();
            assert!(drift.is_in_sync(), "{mode:?}: {drift:?}");
        }
    }
}
