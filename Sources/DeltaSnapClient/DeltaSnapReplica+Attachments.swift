import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// When a replica downloads the attachments its records refer to (docs/CLIENT.md, "Files").
public enum AttachmentPolicy: String, Sendable, CaseIterable {
    /// Each sync downloads what new records refer to (the default: a user on a plane has it all).
    case eager
    /// Only ``DeltaSnapReplica/attachment(_:)`` downloads, on first use.
    case lazy
    /// Nothing is downloaded (records only).
    case none
}

/// What one sync did with attachments.
public struct AttachmentReport: Sendable, Equatable {
    public var uploaded = 0
    public var uploadedBytes: UInt64 = 0
    public var downloaded = 0
    public var downloadedBytes: UInt64 = 0
    /// Files left for a sync with a larger network budget.
    public var postponed = 0
    /// Files that could not be had or sent this time, one line each.
    public var failures: [String] = []

    public init() {}

    /// `attachments: uploaded N (B bytes), downloaded M (C bytes)`, and what waits.
    public var line: String {
        var line = "attachments: uploaded \(uploaded) (\(uploadedBytes) bytes), downloaded \(downloaded) (\(downloadedBytes) bytes)"
        if postponed > 0 { line += ", \(postponed) postponed over the budget" }
        if !failures.isEmpty { line += ", \(failures.count) failed (\(failures[0]))" }
        return line
    }
}

/// One attachment a replica knows of, as `deltasnap attachments` lists it.
public struct AttachmentStatus: Sendable, Equatable {
    public var sha256: String
    public var size: UInt64
    /// `pending-upload`, `cached` or `remote`.
    public var state: String
}

extension DeltaSnapReplica {
    /// Sets when attachments are downloaded, for the syncs that follow.
    public func setAttachmentPolicy(_ policy: AttachmentPolicy) {
        attachmentPolicy = policy
        attachmentsNeedScan = true
        attachmentsSettledEagerly = false
    }

    /// Sets the most bytes of cached attachments kept (nil: no limit); applied now.
    public func setAttachmentCacheLimit(_ bytes: UInt64?) {
        attachmentCacheLimit = bytes
        try? releaseAttachments()
    }

    /// Copies `file` into the replica's own store and returns the reference to put in a
    /// local write. Its upload is queued with the write and always goes before the push of
    /// the write that refers to it; the file is never evicted until the server holds it.
    ///
    /// ```swift
    /// let photo = try await replica.attach(URL(fileURLWithPath: "beach.jpg"), type: "image/jpeg")
    /// try await replica.put(id: "n1", json: #"{"title":"Beach","photo":\#(photo)}"#)
    /// ```
    public func attach(_ file: URL, type: String) throws -> AttachmentReference {
        try attachments.attach(file.path, type: type)
    }

    /// A local file holding `reference`'s proven bytes: the replica's own copy, else the
    /// bundled one (checked, then copied in), else downloaded now (resumed with `Range` after
    /// a cut, checked before it is visible). Throws ``AttachmentError``.
    ///
    /// ```swift
    /// imageView.image = UIImage(contentsOfFile: try await replica.attachment(reference).path)
    /// ```
    public func attachment(_ reference: AttachmentReference) async throws -> URL {
        if let path = try await localCopy(of: reference, budget: nil) { return URL(fileURLWithPath: path) }
        throw AttachmentError.unavailable("attachment \(reference.sha256)")
    }

    /// Every attachment the records (and queued writes) refer to, and every file waiting for
    /// upload, with where it stands here.
    public func attachmentStatuses() throws -> [AttachmentStatus] {
        try storage.attachmentStatuses(attachments)
    }

    /// The reference a record (or a queued write) of the replica makes to `sha256`, or nil.
    public func attachmentReference(_ sha256: String) throws -> AttachmentReference? {
        try storage.referencedAttachment(sha256)
    }

    // MARK: - Sync

    /// Uploads the files `batch`'s writes refer to that wait for upload. Returns why it
    /// stopped when trying later can help (the batch must then wait); a file the server
    /// refuses for good lets the batch go, and the server refuses the write (`missing_attachment`).
    func uploadAttachments(for batch: [PendingWrite]) async -> String? {
        var needed = Set<String>()
        for write in batch {
            guard let value = write.value, let references = try? AttachmentReference.references(in: value) else { continue }
            for reference in references where attachments.state(of: reference.sha256) == .pendingUpload { needed.insert(reference.sha256) }
        }
        for sha256 in needed.sorted() {
            do {
                try await uploadResuming(sha256)
            } catch AttachmentError.failed(let why) {
                lastAttachmentReport.failures.append(why)
                return "attachment \(sha256) not uploaded: \(why)"
            } catch {
                lastAttachmentReport.failures.append("\(sha256): \(error)")
            }
        }
        return nil
    }

    /// After a pull: downloads what the records refer to (``AttachmentPolicy/eager``), then
    /// lets go of files no record refers to any more and keeps the cache within its limit.
    ///
    /// O(changes): it reads the references that came or went since the last settle
    /// (``AttachmentIndex``), never the records. Every reference is gone over only once per
    /// replica in eager mode (its first sync, or after a lazy one), or when the policy changed.
    func settleAttachments(after outcome: SyncOutcome) async {
        switch outcome {
        case .applied, .reset, .notModified: break
        case .failed, .deferred, .postponed: return
        }
        let eager = attachmentPolicy == .eager
        let everything = attachmentsNeedScan || (eager && !attachmentsSettledEagerly && !storage.settledEagerly)
        guard let changes = try? storage.attachmentChanges() else { return }
        // The steady state: no reference changed, nothing is read but that.
        guard everything || !changes.hashes.isEmpty || lastAttachmentReport.uploaded > 0 else { return }
        var referenced: [String: AttachmentReference] = [:]
        var released: [String] = []
        do {
            if everything {
                referenced = try storage.referencedAttachments()
            } else {
                for sha256 in changes.hashes.sorted() {
                    if let reference = try storage.referencedAttachment(sha256) { referenced[sha256] = reference } else { released.append(sha256) }
                }
            }
        } catch {
            return
        }
        var retry = Set<String>()
        var fetched = false
        if eager {
            var budget = networkBudget.maximumBodyBytes.map { max(0, $0 - lastSyncBytesReceived) }
            for reference in referenced.values.sorted(by: { $0.sha256 < $1.sha256 }) where attachments.path(of: reference.sha256) == nil {
                do {
                    let before = lastAttachmentReport.downloadedBytes
                    _ = try await localCopy(of: reference, budget: budget)
                    budget = budget.map { $0 - Int(lastAttachmentReport.downloadedBytes - before) }
                    fetched = true
                } catch AttachmentError.postponed {
                    lastAttachmentReport.postponed += 1
                    retry.insert(reference.sha256)
                } catch {
                    lastAttachmentReport.failures.append("\(reference.sha256): \(error)")
                    retry.insert(reference.sha256)
                }
            }
        }
        // Files no record refers to any more (a deleted record, a replaced photo); a file
        // waiting for upload is never evicted.
        if everything {
            for file in attachments.cachedFiles() where referenced[file.sha256] == nil { attachments.evict(file.sha256) }
        } else {
            for sha256 in released { attachments.evict(sha256) }
        }
        // What failed or waits over the budget is looked at again by the next sync.
        try? storage.consumeAttachmentChanges(through: changes.through, keeping: retry)
        if everything && eager {
            attachmentsSettledEagerly = true
            try? storage.setSettledEagerly(true)
        } else if !eager {
            attachmentsSettledEagerly = false
            try? storage.setSettledEagerly(false)
        }
        attachmentsNeedScan = !retry.isEmpty && storage.borrowed != nil
        if everything || fetched || lastAttachmentReport.uploaded > 0 { trimAttachmentCache() }
    }

    /// Removes cached files no record refers to (a deleted record, a replaced photo), then
    /// the least recently used until the cache fits its limit. Files waiting for upload stay.
    /// O(references + cached files), from the index: run when the limit changes, not per sync.
    func releaseAttachments() throws {
        let referenced = try storage.referencedAttachments()
        for file in attachments.cachedFiles() where referenced[file.sha256] == nil { attachments.evict(file.sha256) }
        trimAttachmentCache()
    }

    /// Evicts the least recently used cached files until the cache fits its limit.
    private func trimAttachmentCache() {
        guard let limit = attachmentCacheLimit else { return }
        let cached = attachments.cachedFiles()
        var total = cached.reduce(0) { $0 + $1.size }
        for file in cached.sorted(by: { $0.used < $1.used }) where total > limit {
            attachments.evict(file.sha256)
            total -= file.size
        }
    }

    // MARK: - Transfers

    /// The attachments URL of this collection (or partition).
    private func attachmentURL(_ sha256: String) -> URL {
        url.appendingPathComponent("attachments").appendingPathComponent(sha256)
    }

    /// The draft version the client speaks (docs/PROTOCOL.md §12.5).
    static let interopVersion = "9"
    /// Bytes per append: a cut costs at most this much again.
    static let uploadPartBytes: UInt64 = 8 << 20
    /// How long a cut upload waits before asking where it stands (see ``uploadResuming(_:)``).
    static let resumeDelay: Duration = .milliseconds(250)

    /// ``upload(_:)``, resumed at once after a cut connection as long as each attempt moved
    /// the upload on (a network that drops every few megabytes still finishes in one sync);
    /// two attempts in a row without progress leave it to the next sync.
    private func uploadResuming(_ sha256: String) async throws {
        var stalled = 0
        var reached: UInt64 = 0
        var seen: UInt64 = 0
        var began: UInt64?
        while true {
            do {
                let size = try await upload(sha256, reached: &reached, began: &began)
                lastAttachmentReport.uploaded += 1
                lastAttachmentReport.uploadedBytes += size - (began ?? 0)
                return
            } catch AttachmentError.failed(let why) {
                // A cut part's bytes show up in the next attempt's offset: progress is seen one
                // attempt late, hence two attempts without it before giving up.
                stalled = reached > seen ? 0 : stalled + 1
                seen = reached
                if stalled >= 2 { throw AttachmentError.failed(why) }
                // The bytes of the cut part that reached the server count only once the server
                // has taken them in (its HEAD waits for an append it knows of, not for one it
                // has yet to start): asked at once on a loaded server, the offset is a part
                // behind, and the whole part is sent again.
                try? await Task.sleep(for: Self.resumeDelay)
            }
        }
    }

    /// Uploads the pending file `sha256`, resuming at the server's offset when an upload of
    /// it began before (this run or an earlier, killed one). Throws ``AttachmentError``:
    /// `.failed` when trying later can help.
    /// `reached`: the furthest offset the server confirmed, kept across attempts; `began`:
    /// the offset the first attempt started from. Returns the file's size.
    private func upload(_ sha256: String, reached: inout UInt64, began: inout UInt64?) async throws -> UInt64 {
        let path = attachments.pendingPath(sha256)
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.uint64Value else {
            throw AttachmentError.unreadable(path)
        }
        var offset: UInt64 = 0
        var location = attachments.uploadLocation(of: sha256)
        if let known = location {
            let progress = try await send(SyncRequest(url: known, method: "HEAD", headers: uploadHeaders(), timeout: timeout))
            switch progress.status {
            case 200, 204:
                offset = progress.header("Upload-Offset").flatMap(UInt64.init) ?? 0
                reached = max(reached, offset)
            case 404: location = nil  // finished, refused or expired: begin again
            default: throw Self.uploadFailure(progress, "asking where the upload stands")
            }
        }
        if location == nil {
            var headers = uploadHeaders()
            headers["Upload-Complete"] = "?0"
            headers["Upload-Length"] = String(size)
            headers["Content-Type"] = "application/octet-stream"
            let begun = try await send(SyncRequest(url: attachmentURL(sha256), method: "POST", headers: headers, body: [], timeout: timeout))
            guard begun.status == 201, let text = begun.header("Location"), let resolved = URL(string: text, relativeTo: url)?.absoluteURL else {
                throw Self.uploadFailure(begun, "beginning the upload")
            }
            location = resolved
            try attachments.setUploadLocation(resolved, of: sha256)
            offset = begun.header("Upload-Offset").flatMap(UInt64.init) ?? 0
        }
        guard let location, let file = FileHandle(forReadingAtPath: path) else { throw AttachmentError.unreadable(path) }
        defer { try? file.close() }
        if began == nil { began = offset }
        while true {
            try file.seek(toOffset: offset)
            let part = [UInt8](try file.read(upToCount: Int(min(Self.uploadPartBytes, size - offset))) ?? Data())
            let last = offset + UInt64(part.count) == size
            var headers = uploadHeaders()
            headers["Upload-Offset"] = String(offset)
            headers["Upload-Complete"] = last ? "?1" : "?0"
            headers["Content-Type"] = "application/partial-upload"
            let answer = try await send(SyncRequest(url: location, method: "PATCH", headers: headers, body: part, timeout: timeout))
            switch answer.status {
            case 200 where last, 201 where last:
                try attachments.markUploaded(sha256)
                return size
            case 201, 204:
                offset = answer.header("Upload-Offset").flatMap(UInt64.init) ?? offset + UInt64(part.count)
                reached = max(reached, offset)
            case 409 where answer.header("Upload-Offset") != nil:
                offset = UInt64(answer.header("Upload-Offset")!) ?? offset
                reached = max(reached, offset)
            case 409:
                // Another append of it still runs (a cut connection's): ask again shortly.
                throw AttachmentError.failed("the upload of \(sha256) is busy")
            case 404:
                // The upload went (expired); the next sync begins it again.
                try attachments.setUploadLocation(nil, of: sha256)
                throw AttachmentError.failed("the upload of \(sha256) expired; it begins again")
            case 400:
                let refusal = answer.body
                guard ServerErrorBody(refusal)?.code == "attachment_mismatch" else {
                    throw Self.uploadFailure(status: answer.status, body: refusal, "appending at \(offset)")
                }
                // The server received other bytes than the file's (something on the way changed
                // them) and kept nothing: sent again, whole — unless the file here is what is
                // damaged, which no retry mends.
                try attachments.setUploadLocation(nil, of: sha256)
                do {
                    try LocalAttachments.prove(path, against: AttachmentReference(sha256: sha256, size: size, type: "application/octet-stream"))
                } catch {
                    throw AttachmentError.refused("the file attached here is damaged: \(error)")
                }
                throw AttachmentError.failed("the server received other bytes than \(sha256)'s; it is sent again")
            default:
                throw Self.uploadFailure(answer, "appending at \(offset)")
            }
        }
    }

    /// Where `reference`'s proven bytes are here, fetching them when they are not: from the
    /// bundle, else the server (within `budget` bytes when given).
    private func localCopy(of reference: AttachmentReference, budget: Int?) async throws -> String? {
        if let path = attachments.path(of: reference.sha256) {
            attachments.touch(reference.sha256)
            return path
        }
        if let bundled = bundledAttachments.map({ ($0 as NSString).appendingPathComponent(reference.sha256) }),
           FileManager.default.fileExists(atPath: bundled), (try? attachments.adoptBundled(bundled, as: reference)) != nil
        {
            return attachments.path(of: reference.sha256)
        }
        try await download(reference, budget: budget)
        return attachments.path(of: reference.sha256)
    }

    /// Downloads `reference` into `partial/`, resuming with `Range` after a cut, proves it and
    /// moves it into `cached/`. The bytes of a cut answer are kept (``SyncResponseCut``) and
    /// the download goes on from them at once, as long as each try brings more; when one
    /// brings nothing, the partial file stays for the next sync or `attachment get`. Nothing
    /// is visible before the whole file's size and SHA-256 are proven.
    private func download(_ reference: AttachmentReference, budget: Int?) async throws {
        let partial = attachments.partialPath(reference.sha256)
        var held = Self.fileSize(partial)
        if held > reference.size {
            try? FileManager.default.removeItem(atPath: partial)
            held = 0
        }
        if let budget, reference.size - held > UInt64(budget) { throw AttachmentError.postponed("attachment \(reference.sha256)") }
        var spent: UInt64 = 0
        while true {
            var headers = requestHeaders()
            headers["Accept-Encoding"] = "identity"
            if held > 0 {
                headers["Range"] = "bytes=\(held)-"
                // Bytes of another representation are never appended to these.
                headers["If-Range"] = "\"\(reference.sha256)\""
            }
            let request = SyncRequest(
                url: attachmentURL(reference.sha256), headers: headers, timeout: timeout, maximumBodyBytes: budget.map { $0 - Int(spent) }, keepsCutBody: true)
            let response: SyncResponse
            var cut: SyncResponseCut?
            do {
                response = try await transport.fetch(request)
            } catch let error as SyncResponseCut {
                response = error.response
                cut = error
            } catch is SyncBodyOverBudget {
                throw AttachmentError.postponed("attachment \(reference.sha256)")
            } catch {
                throw AttachmentError.failed(Self.describe(error))
            }
            defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
            let received = response.bodyFile.map { Self.fileSize($0.path) } ?? 0
            switch response.status {
            case 200:
                try FileManager.default.createDirectory(atPath: (partial as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try? FileManager.default.removeItem(atPath: partial)
                if let body = response.bodyFile {
                    try FileManager.default.moveItem(atPath: body.path, toPath: partial)
                } else {
                    _ = FileManager.default.createFile(atPath: partial, contents: nil)
                }
            case 206 where response.header("Content-Range")?.hasPrefix("bytes \(held)-") == true:
                guard let body = response.bodyFile, let output = FileHandle(forWritingAtPath: partial), let input = FileHandle(forReadingAtPath: body.path) else {
                    throw AttachmentError.failed("the partial download of \(reference.sha256) cannot be continued")
                }
                defer {
                    try? output.close()
                    try? input.close()
                }
                try output.seekToEnd()
                while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty { try output.write(contentsOf: chunk) }
            case 404:
                throw AttachmentError.unavailable("attachment \(reference.sha256)")
            case 416:
                try? FileManager.default.removeItem(atPath: partial)
                throw AttachmentError.failed("the partial download of \(reference.sha256) did not fit the file; it begins again")
            default:
                throw AttachmentError.failed("status \(response.status) for attachment \(reference.sha256)")
            }
            lastAttachmentReport.downloadedBytes += received
            spent += received
            guard let cut else { break }
            held = Self.fileSize(partial)
            // Cut after the last byte: the proof below decides.
            if held >= reference.size { break }
            // A cut that brought nothing new: the partial file waits for a later try.
            guard received > 0 else {
                throw AttachmentError.failed("the download of \(reference.sha256) was cut at byte \(held) of \(reference.size) (\(cut.reason)); it resumes there")
            }
        }
        try attachments.keepProven(partial, as: reference)
        lastAttachmentReport.downloaded += 1
    }

    /// The size of the file at `path` (0 when there is none).
    private static func fileSize(_ path: String) -> UInt64 {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.uint64Value ?? 0
    }

    private func uploadHeaders() -> [String: String] {
        var headers = requestHeaders()
        headers["Upload-Draft-Interop-Version"] = Self.interopVersion
        return headers
    }

    /// Sends one step of an upload. Its answer's body is read here, and its temporary file
    /// removed: every upload answer is small, and a finished upload's `200` carries the
    /// file's reference — left to the callers, each uploaded file left one file behind in
    /// the app's temporary directory.
    private func send(_ request: SyncRequest) async throws -> UploadAnswer {
        let response: SyncResponse
        do {
            response = try await transport.fetch(request)
        } catch {
            throw AttachmentError.failed(Self.describe(error))
        }
        return UploadAnswer(status: response.status, headers: response.headers, body: Self.readBody(response, atMost: Self.uploadAnswerBytes))
    }

    /// What an upload answer is read up to: an error's reason needs no more, and a proxy's
    /// page may be large.
    private static let uploadAnswerBytes = 64 << 10

    /// What an unexpected upload answer means: a `4xx` other than `408`/`429` is the
    /// server's refusal (an over-limit file), anything else is worth trying again.
    private static func uploadFailure(_ answer: UploadAnswer, _ step: String) -> AttachmentError {
        uploadFailure(status: answer.status, body: answer.body, step)
    }

    private static func uploadFailure(status: Int, body: [UInt8], _ step: String) -> AttachmentError {
        let why = "status \(status) \(step)\(ServerErrorBody(body).map { " \($0.code): \($0.message)" } ?? "")"
        return (400...499).contains(status) && ![408, 429].contains(status) ? .refused(why) : .failed(why)
    }

}

/// One upload step's answer, its body already read (and its file gone).
private struct UploadAnswer {
    var status: Int
    /// Header fields by lowercased name, as ``SyncResponse/headers``.
    var headers: [String: String]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers[name.lowercased()] }
}

extension ReplicaStorage {
    /// What `deltasnap attachments` lists: each referenced attachment and each file waiting
    /// for upload, with its state in `files`.
    func attachmentStatuses(_ files: LocalAttachments) throws -> [AttachmentStatus] {
        var statuses: [String: AttachmentStatus] = [:]
        for reference in try referencedAttachments().values {
            statuses[reference.sha256] = AttachmentStatus(sha256: reference.sha256, size: reference.size, state: files.state(of: reference.sha256).rawValue)
        }
        for sha256 in files.pendingHashes() where statuses[sha256] == nil {
            let size = (try? FileManager.default.attributesOfItem(atPath: files.pendingPath(sha256))[.size] as? NSNumber)?.uint64Value ?? 0
            statuses[sha256] = AttachmentStatus(sha256: sha256, size: size, state: LocalAttachments.State.pendingUpload.rawValue)
        }
        return statuses.values.sorted { $0.sha256 < $1.sha256 }
    }
}
