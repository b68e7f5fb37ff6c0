import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore
import PostgresNIO

extension PostgresDatabase {
    /// ``DeltaSnapStore/CollectionStore/collectAttachmentGarbage(unreferencedFor:now:)`` in one
    /// transaction that holds `deltasnap_attachment_refs` in `SHARE ROW EXCLUSIVE` mode: every
    /// write that refers to a blob takes `ROW EXCLUSIVE` on it before it looks the blob up
    /// (``attachmentSizes(_:on:)``), so a write either commits before the scan sees it or
    /// looks after the removal and is refused `missing_attachment`.
    package func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage {
        try await transaction { connection in
            try await connection.checkedQuery("LOCK TABLE deltasnap_attachment_refs IN SHARE ROW EXCLUSIVE MODE", logger: logger)
            var sweep = AttachmentSweep(now: now, grace: grace)
            let marker = ByteBuffer(bytes: Array("\"\(AttachmentReference.marker)\"".utf8))
            for try await (cid, body) in try await connection.checkedQuery("""
                SELECT cid, body FROM deltasnap_records WHERE NOT hidden AND position(\(marker) in body) > 0
                UNION ALL
                SELECT c.cid, h.body FROM deltasnap_history h JOIN deltasnap_collections c ON c.name = h.collection
                WHERE position(\(marker) in h.body) > 0
                """, logger: logger).decode((Int64, ByteBuffer).self) {
                sweep.refer(collectionID: cid, body: Array(body.readableBytesView))
            }
            var cids: [Int64] = [], hashes: [String] = [], types: [String] = []
            for (cid, references) in sweep.references {
                for (sha256, type) in references {
                    cids.append(cid)
                    hashes.append(sha256)
                    types.append(type)
                }
            }
            try await connection.checkedQuery("DELETE FROM deltasnap_attachment_refs", logger: logger)
            if !cids.isEmpty {
                try await connection.checkedQuery("""
                    INSERT INTO deltasnap_attachment_refs(cid, sha256, type) SELECT * FROM unnest(\(cids)::bigint[], \(hashes)::text[], \(types)::text[])
                    """, logger: logger)
            }
            var orphaned: [String: Int64] = [:]
            for try await (sha256, since) in try await connection.checkedQuery(
                "SELECT sha256, since FROM deltasnap_attachment_orphans", logger: logger
            ).decode((String, Int64).self) { orphaned[sha256] = since }
            var held: [(sha256: String, storedAt: Int64)] = []
            var sizes: [String: UInt64] = [:]
            for try await (sha256, size, storedAt) in try await connection.checkedQuery(
                "SELECT sha256, size, stored_at FROM deltasnap_blobs", logger: logger
            ).decode((String, Int64, Int64).self) {
                held.append((sha256, storedAt))
                sizes[sha256] = UInt64(size)
            }
            let plan = sweep.plan(held: held, orphanedSince: orphaned)
            if !plan.remove.isEmpty {
                try await connection.checkedQuery("DELETE FROM deltasnap_blobs WHERE sha256 = ANY(\(plan.remove))", logger: logger)
                try await connection.checkedQuery("DELETE FROM deltasnap_blob_chunks WHERE sha256 = ANY(\(plan.remove))", logger: logger)
                // A collected blob proves nothing any more: whoever holds the bytes uploads again.
                try await connection.checkedQuery("DELETE FROM deltasnap_attachment_possession WHERE sha256 = ANY(\(plan.remove))", logger: logger)
            }
            try await connection.checkedQuery("DELETE FROM deltasnap_attachment_orphans", logger: logger)
            if !plan.orphans.isEmpty {
                let names = Array(plan.orphans.keys)
                try await connection.checkedQuery("""
                    INSERT INTO deltasnap_attachment_orphans(sha256, since)
                    SELECT * FROM unnest(\(names)::text[], \(names.map { plan.orphans[$0]! })::bigint[])
                    """, logger: logger)
            }
            return AttachmentGarbage(removed: plan.remove.count, bytesRemoved: plan.remove.reduce(0) { $0 + (sizes[$1] ?? 0) }, waiting: plan.orphans.count)
        }
    }
}
