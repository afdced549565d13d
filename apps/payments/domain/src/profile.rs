//! Account profiles: the receipt address an account's owner registered, an optional item of the
//! ledger table beside the account's entries and balance (`pk = account#{account_id}`,
//! `sk = profile`, `receipt_email`). The relay sends an account's receipts there, whatever
//! address a payment event names.
//!
//! The ledger contract fixes the entry and balance items only; a profile is another sort key
//! of the same partition, written by whoever owns the customer's details (an account service,
//! an operator with [`Profiles::put`]), never by the payments consumer, so a producer cannot
//! choose it.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::classify_sdk_error;

use crate::payment::valid_email;

/// The profile item's sort key.
pub const PROFILE_SK: &str = "profile";

/// The profile's attribute holding the account's receipt address.
pub const RECEIPT_EMAIL: &str = "receipt_email";

/// The account profiles in the ledger table.
#[derive(Debug, Clone)]
pub struct Profiles {
    client: Client,
    table: String,
}

fn key(account_id: &str) -> [(String, AttributeValue); 2] {
    [
        ("pk".to_owned(), AttributeValue::S(format!("account#{account_id}"))),
        ("sk".to_owned(), AttributeValue::S(PROFILE_SK.to_owned())),
    ]
}

impl Profiles {
    /// The profiles in the ledger `table`, through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Profiles { client, table: table.into() }
    }

    /// The account's registered receipt address, `None` when it has no profile or its profile
    /// names none. One eventually consistent read of that attribute alone (half a read unit;
    /// the relay's role may read nothing else of the ledger). An address the payment contract
    /// would not accept is `Malformed`.
    pub async fn receipt_email(&self, account_id: &str) -> Result<Option<String>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(account_id).into_iter().collect()))
            .projection_expression("#email")
            .expression_attribute_names("#email", RECEIPT_EMAIL)
            .send()
            .await
            .map_err(|e| classify_sdk_error("GetItem", e))?;
        match out.item().and_then(|item| item.get(RECEIPT_EMAIL)) {
            None => Ok(None),
            Some(AttributeValue::S(address)) if valid_email(address) => Ok(Some(address.clone())),
            Some(_) => Err(StoreError::new(
                StoreErrorKind::Malformed,
                format!("the profile of account {account_id} holds no valid receipt_email"),
            )),
        }
    }

    /// Registers `email` as the account's receipt address (creating the profile, or replacing
    /// the address of the one there). For an account service, an operator's tool or a test.
    pub async fn put(&self, account_id: &str, email: &str) -> Result<(), StoreError> {
        if !valid_email(email) {
            return Err(StoreError::new(StoreErrorKind::Malformed, "receipt_email must be an email address"));
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(account_id).into_iter().collect()))
            .update_expression("SET #email = :email")
            .expression_attribute_names("#email", RECEIPT_EMAIL)
            .expression_attribute_values(":email", AttributeValue::S(email.to_owned()))
            .send()
            .await
            .map_err(|e| classify_sdk_error("UpdateItem", e))?;
        Ok(())
    }
}
