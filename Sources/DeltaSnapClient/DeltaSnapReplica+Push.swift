import DeltaSnapCore
import Foundation

extension DeltaSnapReplica {
    /// The push endpoint next to the collection URL.
    var pushURL: URL { url.appendingPathComponent("mutations") }

    /// Pushes every queued write, oldest first, in batches; settles each answer in one
    /// local transaction. Status classes decide (docs/PROTOCOL.md §6): a `200` answers per
    /// write; `401`, `408`, `429`, `5xx` and network errors keep the writes queued (retried
    /// later, exactly once thanks to their write numbers); `413`/`invalid_batch` split the
    /// batch; `404`/`410` settle its deletes (what they deleted is gone) and keep the rest;
    /// another `4xx` with the server's JSON refusal refuses the batch's writes, one without
    /// it (a proxy's page) keeps them.
    func pushPending(now: Date, waits: WaitPolicy) async -> PushReport {
        var report = PushReport()
        guard let queued = try? storage.pendingCount(acknowledged: false), queued > 0 else { return report }
        if let waitingUntil = waitingUntil(now, waits, ownBackoff: pushNotBefore) {
            report.failure = "deferred until \(HTTPDate.format(Int64(waitingUntil.timeIntervalSince1970.rounded(.up))))"
            report.failureKind = .unavailable
            report.stillQueued = queued
            return report
        }
        var serverAsked: Double?
        do {
            // The queued writes belong to this collection on this server: bind before the
            // first of them leaves (the first successful pull would be too late).
            bindIfUnbound()
            var client = try storage.clientID()
            var rotated = false
            var batchLimit = pushBatchSize
            pushing: while true {
                // A wait the server asked for holds the next batch too.
                guard serverAsked == nil else { break }
                var batch = try storage.claimPushBatch(limit: batchLimit)
                guard !batch.isEmpty else { break }
                var body = PushRequest(client: client, mutations: batch.map(\.mutation)).bytes
                // Keep a request well under the server's 1 MiB: halve until it fits.
                while body.count > Self.maximumBatchBytes && batch.count > 1 {
                    batch.removeLast(batch.count / 2)
                    body = PushRequest(client: client, mutations: batch.map(\.mutation)).bytes
                }
                // The files the batch's writes refer to go first: the server refuses a write
                // whose file it does not hold (docs/PROTOCOL.md §12.2).
                if let failure = await uploadAttachments(for: batch) {
                    report.failure = failure
                    report.failureKind = .unavailable
                    break
                }
                var headers = requestHeaders()
                headers["Content-Type"] = "application/json"
                let response: SyncResponse
                do {
                    response = try await transport.fetch(SyncRequest(url: pushURL, method: "POST", headers: headers, body: body, timeout: timeout))
                } catch {
                    report.failure = Self.describe(error)
                    report.failureKind = .unavailable
                    break
                }
                report.batches += 1
                let answer = Self.readBody(response)
                serverAsked = RetryPolicy.serverDelay(retryAfter: response.header("Retry-After"), backoff: response.header("Backoff"), now: now)
                let error = Self.errorText(answer)
                switch response.status {
                case 200:
                    guard let parsed = PushResponse.parse(answer), parsed.client == client else {
                        report.failure = "the answer is unreadable; the writes stay queued"
                        break pushing
                    }
                    // The server has processed numbers this replica never gave out: its numbers
                    // went backwards (a restored backup). The answer may be another write's:
                    // take none of it, and start a fresh ledger under a new client id.
                    if parsed.lastSeq > (try storage.lastSeq()) {
                        guard !rotated else {
                            report.failure = "the server reports write numbers this replica never used, even for a new client id"
                            break pushing
                        }
                        rotated = true
                        try storage.rotateClientID()
                        client = try storage.clientID()
                        continue pushing
                    }
                    let complete = try settle(batch, with: parsed.results, into: &report)
                    if !complete {
                        report.failure = "the server answered for only some writes; the rest stay queued"
                        break pushing
                    }
                case 413 where batch.count > 1, 400 where batch.count > 1 && error?.code == "invalid_batch":
                    // Split until the write that does not fit (or cannot be read) is alone.
                    batchLimit = max(1, batch.count / 2)
                case 401, 408, 429, 500...599:
                    report.failure = "status \(response.status)\(error.map { ": \($0.message)" } ?? "")"
                    if FallbackLadder.isUnavailable(status: response.status) { report.failureKind = .unavailable }
                    break pushing
                case 404, 410:
                    // A delete of what is gone did what the user wanted. For the other writes a
                    // missing push endpoint (an older server, a wrong URL) says nothing: keep them.
                    let deletes = batch.filter { $0.operation == .delete }
                    _ = try settle(deletes, with: deletes.map { MutationResult(seq: $0.seq, status: .applied(version: 0)) }, into: &report)
                    if deletes.count < batch.count {
                        report.failure = "status \(response.status); the writes other than deletes stay queued"
                        break pushing
                    }
                case 400...499:
                    // The server's own JSON refusal refuses the batch's writes; anything else
                    // (a proxy's HTML page, a setting such as writes_disabled, a broken
                    // transfer) is not the writes' fault, so they stay queued.
                    guard let error, !Self.notTheWritesFault.contains(error.code) else {
                        report.failure = "status \(response.status)\(error.map { ": \($0.message)" } ?? ""); the writes stay queued"
                        break pushing
                    }
                    _ = try settle(batch, with: batch.map { MutationResult(seq: $0.seq, status: .refused(error)) }, into: &report)
                default:
                    report.failure = "unexpected status \(response.status)"
                    break pushing
                }
            }
        } catch {
            report.failure = "local error: \(Self.describe(error))"
        }
        report.stillQueued = (try? storage.pendingCount(acknowledged: false)) ?? 0
        if report.failure != nil && report.failureKind == nil { report.failureKind = .rejected }
        recordPushOutcome(failed: report.failure != nil, serverAsked: serverAsked, now: now)
        return report
    }

    /// 4xx codes that say nothing about the writes themselves: they stay queued.
    static let notTheWritesFault: Set<String> = ["writes_disabled", "unreadable_body"]

    /// About half the server's default limit, so a batch of large records still fits.
    static let maximumBatchBytes = 512 * 1024

    /// Applies a push answer to the queue; false when some write of `batch` got no result.
    private func settle(_ batch: [PendingWrite], with results: [MutationResult], into report: inout PushReport) throws -> Bool {
        let bySeq = Dictionary(results.map { ($0.seq, $0.status) }, uniquingKeysWith: { first, _ in first })
        var accepted: [UInt64] = []
        var refused: [(write: PendingWrite, refusal: MutationRefusal)] = []
        var complete = true
        for write in batch {
            switch bySeq[write.seq] {
            case .applied?, .duplicate?:
                accepted.append(write.seq)
            case .copied(_, let copy)?:
                accepted.append(write.seq)
                report.copied.append(CopiedWrite(seq: write.seq, operation: write.operation, id: write.id, copy: copy))
            case .refused(let refusal)? where write.operation == .delete && refusal.code == "not_found":
                accepted.append(write.seq)
            case .refused(let refusal)?:
                refused.append((write, refusal))
            case nil:
                complete = false
            }
        }
        try storage.settle(accepted: accepted, refused: refused)
        report.accepted += accepted.count
        report.refused += refused.map { RefusedWrite(seq: $0.write.seq, operation: $0.write.operation, id: $0.write.id, refusal: $0.refusal) }
        return complete
    }

    private func recordPushOutcome(failed: Bool, serverAsked: Double?, now: Date) {
        // What the server asked for holds every request after this one, in this run and the
        // next (a tool started again at once): it is kept with the replica.
        let serverNotBefore = serverAsked.map { now.addingTimeInterval($0) }
        if serverNotBefore != nil || state.serverNotBefore != nil {
            var next = state
            next.serverNotBefore = serverNotBefore
            persist(next)
        }
        if failed {
            consecutivePushFailures += 1
            let delay = retryPolicy.delay(afterFailures: consecutivePushFailures, serverAsked: serverAsked, random: Double.random(in: 0..<1))
            pushNotBefore = now.addingTimeInterval(delay)
            if (try? storage.value(for: "pushFailingSince")) == nil {
                try? storage.writeTransaction { try storage.setValue(String(now.timeIntervalSince1970), for: "pushFailingSince") }
            }
        } else {
            consecutivePushFailures = 0
            pushNotBefore = nil
            if (try? storage.value(for: "pushFailingSince")) != nil {
                try? storage.writeTransaction { try storage.setValue(nil, for: "pushFailingSince") }
            }
        }
    }

    /// A small answer's body (a push answer, a history), gzip decoded; its file is removed.
    static func readBody(_ response: SyncResponse, atMost limit: Int? = nil) -> [UInt8] {
        guard let file = response.bodyFile else { return [] }
        defer { try? FileManager.default.removeItem(at: file) }
        guard let data = limit.map({ firstBytes(of: file, count: $0) }) ?? FileManager.default.contents(atPath: file.path) else { return [] }
        let bytes = [UInt8](data)
        // URLSession usually decodes gzip itself; a transport that does not leaves it to us.
        if bytes.starts(with: [0x1F, 0x8B]), let decoded = try? GzipDecompressor.decompress(bytes) { return decoded }
        return bytes
    }

    /// The first `count` bytes of `file`: an error's reason needs no more, and a proxy's page
    /// may be large.
    private static func firstBytes(of file: URL, count: Int) -> Data? {
        guard let handle = try? FileHandle(forReadingFrom: file) else { return nil }
        defer { try? handle.close() }
        return try? handle.read(upToCount: count)
    }

    /// The `{"error","message"}` body of an error answer.
    private static func errorText(_ body: [UInt8]) -> MutationRefusal? {
        ServerErrorBody(body).map { MutationRefusal(code: $0.code, message: $0.message) }
    }

    // MARK: - Status

    /// The status dot: red when syncing (pull or push) has failed for over an hour, amber
    /// while writes are pending or the replica has not synced yet, green otherwise.
    public var indicator: SyncIndicator {
        let now = Date()
        let pushFailingSince = (try? storage.value(for: "pushFailingSince")).flatMap { $0.flatMap(Double.init) }
        if status == .failing { return .red }
        if let pushFailingSince, now.timeIntervalSince1970 - pushFailingSince > SyncStatus.failingAfter { return .red }
        let pending = (try? storage.pendingCount(acknowledged: false)) ?? 0
        let settling = (try? storage.pendingCount(acknowledged: true)) ?? 0
        if pending + settling > 0 || status != .synced { return .amber }
        return .green
    }

    /// The writes not yet settled, oldest first: queued ones and, with
    /// `includeAcknowledged`, accepted ones waiting for the pull that brings them.
    public func pendingWrites(includeAcknowledged: Bool = true) throws -> [PendingWrite] {
        try storage.pendingWrites(includeAcknowledged: includeAcknowledged)
    }
}
