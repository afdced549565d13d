//! The bench's Kafka rows (`bench/harness/triggers.py`) put the payments on partitions as a
//! producer keyed by account does with Kafka's default partitioner (murmur2 of the key, modulo
//! the partitions), so the rows of few and of hot accounts carry several partitions, as the
//! module says ("each partition carrying several accounts") and issue 38's table assumes
//! ("3 partitions, accounts keyed to partitions"). Run with python3, no AWS.

use repo_checks::root;
use std::process::Command;

/// Kafka's `Utils.murmur2`, as the Java client's default partitioner hashes a record's key.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().unwrap());
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition the harness gives each of `accounts` accounts (`acct_00`, ...).
fn harness_partitions(accounts: usize) -> Vec<u32> {
    let script = format!(
        "from bench.harness import triggers\nprint(' '.join(str(triggers.partition_of(f'acct_{{a:02d}}')) for a in range({accounts})))"
    );
    let out = Command::new("python3").arg("-c").arg(script).current_dir(root()).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect()
}

/// The few-accounts row (3 accounts) and the hot row (2): the harness's partitions are Kafka's,
/// and more than one.
#[test]
fn the_kafka_rows_key_accounts_to_partitions_as_kafka_does() {
    for accounts in [3, 2] {
        let kafka: Vec<u32> =
            (0..accounts).map(|a| (murmur2(format!("acct_{a:02}").as_bytes()) & 0x7fff_ffff) % 3).collect();
        let harness = harness_partitions(accounts);
        let spread = harness.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(spread > 1, "{accounts} accounts all on one partition in the harness: {harness:?} (Kafka: {kafka:?})");
        assert_eq!(harness, kafka, "{accounts} accounts: the harness's partitions against Kafka's default partitioner");
    }
}
