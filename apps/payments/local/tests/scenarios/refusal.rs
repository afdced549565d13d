//! The refusing proxy: SES answers `MessageRejected` for a recipient the workload marks, as its
//! sandbox does for an unverified one, which the local SES cannot do itself; other sends pass.

use std::sync::Arc;

use aws_sdk_dynamodb::config::{Credentials, Region};
use effectively_once_dynamodb::testing::{endpoint, unique_name};
use effectively_once_effects::email::SendErrorKind;
use effectively_once_effects::{EmailMessage, EmailSender, SesSender};
use local::proxy::{NoFaults, Proxy, RefuseRecipients};
use payments_local::invariants::sent_emails;
use payments_local::resources::{self, Clients};
use payments_local::workload::REFUSED_PREFIX;

#[tokio::test]
async fn a_marked_recipient_is_refused_for_good_and_nothing_is_sent() {
    let clients = Clients::local().await;
    resources::up(&clients, &unique_name("ref")).await.unwrap();
    let upstream = endpoint().trim_start_matches("http://").trim_end_matches('/').to_owned();
    let proxy = Proxy::start(&upstream, Arc::new(RefuseRecipients::new(REFUSED_PREFIX, NoFaults))).await.unwrap();
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(proxy.url())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .load()
        .await;
    let ses = SesSender::new(aws_sdk_sesv2::Client::new(&sdk), resources::RECEIPT_FROM);
    let run = unique_name("ref");
    let refused = format!("{REFUSED_PREFIX}1@{run}.example.com");
    let accepted = format!("customer-1@{run}.example.com");
    let message = |to: &str| EmailMessage { to: to.into(), subject: "Receipt".into(), text: "Paid".into() };

    let err = ses.send(&message(&refused)).await.unwrap_err();
    assert_eq!(err.kind, SendErrorKind::Rejected, "{err}");
    ses.send(&message(&accepted)).await.unwrap();

    let emails = sent_emails().unwrap();
    assert!(!emails.contains(&refused), "a refused send reaches no mailbox");
    assert_eq!(emails.iter().filter(|to| **to == accepted).count(), 1);
    assert_eq!(proxy.injected().get("refused ses:SendEmail"), Some(&1));
}
