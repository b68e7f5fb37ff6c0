import DeltaSnapCore
import DeltaSnapStore
import Foundation

extension SQLiteDatabase {
    /// ``DeltaSnapStore/CollectionStore/collectAttachmentGarbage(unreferencedFor:now:)`` in one
    /// write transaction: no write can refer to a blob between the scan and its removal.
    package func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) throws -> AttachmentGarbage {
        try db.transaction(.immediate) {
            var sweep = AttachmentSweep(now: now, grace: grace)
            let marker = Array("\"\(AttachmentReference.marker)\"".utf8)
            for sql in [
                "SELECT cid, body FROM records WHERE hidden = 0 AND instr(body, ?) > 0",
                "SELECT c.cid, h.body FROM history h JOIN collections c ON c.name = h.collection WHERE instr(h.body, ?) > 0",
            ] {
                let scan = try db.prepare(sql)
                try scan.bind(1, blob: marker)
                while try scan.step() { sweep.refer(collectionID: scan.int64(0), body: scan.blob(1)) }
            }
            try db.execute("DELETE FROM attachment_refs")
            let insert = try db.prepare("INSERT INTO attachment_refs(cid, sha256, type) VALUES (?, ?, ?)")
            for (cid, references) in sweep.references {
                for (sha256, type) in references {
                    try insert.bind(1, cid)
                    try insert.bind(2, sha256)
                    try insert.bind(3, type)
                    try insert.run()
                }
            }
            var orphaned: [String: Int64] = [:]
            let orphans = try db.prepare("SELECT sha256, since FROM attachment_orphans")
            while try orphans.step() { orphaned[orphans.string(0)] = orphans.int64(1) }
            // A file's modification time is when it was last stored: an upload of the same
            // bytes renames a fresh file over it.
            let held = blobs.hashes().map { sha256 in
                let modified = (try? FileManager.default.attributesOfItem(atPath: blobs.path(of: sha256))[.modificationDate] as? Date) ?? Date()
                return (sha256: sha256, storedAt: Int64(modified.timeIntervalSince1970))
            }
            let plan = sweep.plan(held: held, orphanedSince: orphaned)
            var garbage = AttachmentGarbage(waiting: plan.orphans.count)
            // A collected blob proves nothing any more: whoever holds the bytes uploads again.
            let forget = try db.prepare("DELETE FROM attachment_possession WHERE sha256 = ?")
            for sha256 in plan.remove {
                try forget.bind(1, sha256)
                try forget.run()
                let size = blobs.size(of: sha256) ?? 0
                if blobs.remove(sha256) {
                    garbage.removed += 1
                    garbage.bytesRemoved += size
                }
            }
            try db.execute("DELETE FROM attachment_orphans")
            let keep = try db.prepare("INSERT INTO attachment_orphans(sha256, since) VALUES (?, ?)")
            for (sha256, since) in plan.orphans {
                try keep.bind(1, sha256)
                try keep.bind(2, since)
                try keep.run()
            }
            return garbage
        }
    }
}
