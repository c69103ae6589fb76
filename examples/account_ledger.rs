//! Account ledger: an account embeds its 5 latest transactions and keeps its balance as the
//! exact `Decimal128` sum of every transaction's amount. A transfer pushes a debit to one account
//! and a credit to the other in one transaction of the caller's, so that money is never seen
//! leaving one account without arriving in the other. A thousand payments of 0.10 make exactly
//! 100.00 (as `f64` they would not), and a reconcile finds nothing to repair.
//!
//! `cargo run --example account_ledger --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{DateTime, Decimal128};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Store, Subset};

/// One movement of money: positive in, negative out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Transaction {
    #[serde(rename = "_id")]
    id: ObjectId,
    amount: Decimal128,
    memo: String,
    at: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "accounts")]
struct Account {
    #[serde(rename = "_id")]
    id: ObjectId,
    owner: String,
    #[subset(
        child = "transactions",
        keep = 5,
        sort = "at desc",
        count = "transaction_count",
        sum = "balance = amount"
    )]
    recent: Vec<Transaction>,
    #[serde(default)]
    transaction_count: i64,
    balance: Decimal128,
}

fn money(text: &str) -> Result<Decimal128, Box<dyn std::error::Error>> {
    Ok(text.parse()?)
}

fn transaction(amount: Decimal128, memo: &str, at: i64) -> Transaction {
    Transaction {
        id: ObjectId::new(),
        amount,
        memo: memo.to_owned(),
        at: DateTime::from_millis(at),
    }
}

fn print_account(a: &Account) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{}: balance {}, {} transactions, latest:",
        a.owner, a.balance, a.transaction_count
    );
    for t in &a.recent {
        println!(
            "    {}  {:>8}  {}",
            t.at.try_to_rfc3339_string()?,
            t.amount.to_string(),
            t.memo
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Returned from `main`, an error would print as its `Debug`, without the advice its `Display`
    // gives: print that, then each cause it does not already quote.
    let Err(error) = run().await else {
        return std::process::ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    let shown = error.to_string();
    std::iter::successors(error.source(), |e| e.source())
        .filter(|cause| !shown.contains(&cause.to_string()))
        .for_each(|cause| eprintln!("caused by: {cause}"));
    std::process::ExitCode::FAILURE
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let client = server.client().await?;
    let db = client.database("subset_example_account_ledger");
    db.drop().await?;
    let store = Store::<Account>::new(&db);
    store.ensure_indexes().await?;
    let transactions = store.children(Account::RECENT);

    let zero = money("0")?;
    let open = |owner: &str| Account {
        id: ObjectId::new(),
        owner: owner.to_owned(),
        recent: Vec::new(),
        transaction_count: 0,
        balance: zero,
    };
    let (alice, bob) = (open("alice"), open("bob"));
    store.insert(&alice).await?;
    store.insert(&bob).await?;

    // A thousand payments of 0.10 into alice's account: 200 one by one, the rest in batches.
    let dime = money("0.10")?;
    let payments: Vec<Transaction> = (0..1000)
        .map(|i| transaction(dime, &format!("payment {i}"), i))
        .collect();
    for p in &payments[..200] {
        transactions.push(&alice.id, p).await?;
    }
    for batch in payments[200..].chunks(100) {
        transactions.push_many(&alice.id, batch).await?;
    }
    let as_floats: f64 = (0..1000).map(|_| 0.10_f64).sum();
    let got = store
        .get(&alice.id)
        .await?
        .ok_or("alice's account is gone")?;
    println!(
        "1000 payments of 0.10: balance {} (as f64: {as_floats})",
        got.balance
    );
    assert_eq!(got.balance, money("100.00")?, "the balance is exact");
    assert_ne!(as_floats, 100.0, "the f64 sum drifts");

    // A transfer: the debit and the credit commit together, or neither does.
    let amount = money("42.35")?;
    let negated = money("-42.35")?;
    let mut session = client.start_session().await?;
    session.start_transaction().await?;
    transactions
        .push(&alice.id, &transaction(negated, "to bob", 2000))
        .session(&mut session)
        .await?;
    transactions
        .push(&bob.id, &transaction(amount, "from alice", 2000))
        .session(&mut session)
        .await?;
    session.commit_transaction().await?;

    let alice_now = store
        .get(&alice.id)
        .await?
        .ok_or("alice's account is gone")?;
    let bob_now = store.get(&bob.id).await?.ok_or("bob's account is gone")?;
    print_account(&alice_now)?;
    print_account(&bob_now)?;
    assert_eq!(alice_now.balance, money("57.65")?, "alice paid 42.35");
    assert_eq!(bob_now.balance, money("42.35")?, "bob received 42.35");

    // Recomputed from the transactions collection with the server's `$sum`: nothing to repair.
    for account in [&alice, &bob] {
        let drift = transactions.reconcile(&account.id).await?;
        assert!(
            drift.is_clean(),
            "the ledger agrees with its transactions: {drift:?}"
        );
    }
    println!(
        "ledger exact: balances 57.65 and 42.35, total 100.00, reconcile found nothing to repair"
    );
    db.drop().await?;
    Ok(())
}
