//! Seeds the delivery-app data (shops with embedded reviews) into database `delivery`, for trying
//! the command by hand: `MONGODB_URI=mongodb://… cargo run -p subset-cli --example seed_delivery`.
//! Without `MONGODB_URI` it seeds a throwaway server and prints its URI, then keeps it running
//! until Enter is pressed.

#[path = "../tests/support/delivery.rs"]
mod support;

use subset_testkit::{MongoServer, Topology};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::start(Topology::Standalone).await?;
    let db = server.client().await?.database("delivery");
    db.drop().await?;
    support::seed(&db).await;
    println!("seeded `delivery` on {}", server.uri());
    if !server.is_external() {
        println!("press Enter to stop the server");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
    }
    Ok(())
}
