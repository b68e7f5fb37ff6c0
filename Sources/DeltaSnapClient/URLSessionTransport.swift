import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``SyncTransport`` over URLSession: no URL cache (a cache could turn a 304 into a stale
/// 200), the body streamed to a temporary file as it arrives.
public final class URLSessionTransport: NSObject, SyncTransport, Sendable {
    private let directory: URL

    /// `directory` receives the temporary body files (the system's temporary directory by default).
    public init(temporaryDirectory: URL = URL(fileURLWithPath: NSTemporaryDirectory())) {
        directory = temporaryDirectory
    }

    public func fetch(_ request: SyncRequest) async throws -> SyncResponse {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        let seconds = Double(request.timeout.components.seconds) + Double(request.timeout.components.attoseconds) / 1e18
        configuration.timeoutIntervalForRequest = seconds
        configuration.timeoutIntervalForResource = max(seconds, 3600)
        let file = directory.appendingPathComponent("deltasnap-body-\(UUID().uuidString)")
        let receiver = try BodyReceiver(file: file, limit: request.maximumBodyBytes, keepsCutBody: request.keepsCutBody)
        let session = URLSession(configuration: configuration, delegate: receiver, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var urlRequest = URLRequest(url: request.url)
        urlRequest.cachePolicy = .reloadIgnoringLocalCacheData
        urlRequest.httpMethod = request.method
        if let body = request.body { urlRequest.httpBody = Data(body) }
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                receiver.start(session.dataTask(with: urlRequest), continuation: continuation)
            }
        } onCancel: {
            // Not `session.invalidateAndCancel()`: run before the task exists (the caller was
            // cancelled already), it left a task created afterwards never completing.
            receiver.cancel()
        }
    }
}

/// Writes a data task's body to a file chunk by chunk and reports the response at the end;
/// with a `limit`, refuses a 200 whose announced size passes it (or is not announced) before
/// any of its body is received, and reports that instead.
private final class BodyReceiver: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let file: URL
    private let handle: FileHandle
    private let limit: Int?
    /// Whether a body cut short is handed over (``SyncResponseCut``) instead of dropped.
    private let keepsCutBody: Bool
    // NSLock, not Mutex: the client is Foundation-only and builds for iOS 17, where
    // Synchronization's Mutex is not available (iOS 18); it links no NIO.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<SyncResponse, any Error>?
    private var response: HTTPURLResponse?
    private var written = 0
    private var writeError: (any Error)?

    init(file: URL, limit: Int?, keepsCutBody: Bool) throws {
        self.file = file
        self.limit = limit
        self.keepsCutBody = keepsCutBody
        guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: file.path])
        }
        handle = try FileHandle(forWritingTo: file)
    }

    private var task: URLSessionDataTask?
    private var isCancelled = false

    func start(_ task: URLSessionDataTask, continuation: CheckedContinuation<SyncResponse, any Error>) {
        let cancelled = lock.withLock {
            if !isCancelled {
                self.continuation = continuation
                self.task = task
            }
            return isCancelled
        }
        guard !cancelled else {
            try? handle.close()
            try? FileManager.default.removeItem(at: file)
            return continuation.resume(throwing: CancellationError())
        }
        task.resume()
    }

    /// The caller was cancelled: before ``start(_:continuation:)`` it throws at once, after
    /// it the task is cancelled (and completes with an error).
    func cancel() {
        let task = lock.withLock {
            isCancelled = true
            return self.task
        }
        task?.cancel()
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        lock.withLock { self.response = response as? HTTPURLResponse }
        // Only a 200's (or a resumed download's 206's) body counts against a budget (an error answer is small, and its
        // Retry-After must be heard). Its announced size is compared as announced — bytes on
        // the wire, gzip — and a body that does not announce one (chunked: a large streamed
        // body) is not started: its size is only known once it has been paid for.
        if let limit, let http = response as? HTTPURLResponse, http.statusCode == 200 || http.statusCode == 206 {
            // The header itself: URLSession reports no expected length for a body it decodes.
            let announced = http.value(forHTTPHeaderField: "Content-Length").flatMap { Int($0) }
                ?? (response.expectedContentLength < 0 ? nil : Int(response.expectedContentLength))
            if announced.map({ $0 > limit }) ?? true {
                lock.withLock { writeError = SyncBodyOverBudget(announcedBytes: announced, limit: limit) }
                completionHandler(.cancel)
                return
            }
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        lock.withLock {
            do {
                try handle.write(contentsOf: data)
                written += data.count
            } catch {
                writeError = error
                dataTask.cancel()
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let (continuation, response, written, writeError, cancelled) = lock.withLock {
            defer { self.continuation = nil }
            return (self.continuation, self.response, self.written, self.writeError, self.isCancelled)
        }
        try? handle.close()
        // A connection cut mid-body: what arrived is kept for a Range request to go on from.
        if keepsCutBody, let error, writeError == nil, !cancelled, written > 0, let response, response.statusCode == 200 || response.statusCode == 206 {
            continuation?.resume(throwing: SyncResponseCut(response: SyncResponse(status: response.statusCode, headers: Self.fields(of: response), bodyFile: file), reason: error.localizedDescription))
            return
        }
        if let failure = writeError ?? error {
            try? FileManager.default.removeItem(at: file)
            continuation?.resume(throwing: failure)
            return
        }
        guard let response else {
            try? FileManager.default.removeItem(at: file)
            continuation?.resume(throwing: URLError(.badServerResponse))
            return
        }
        if written == 0 { try? FileManager.default.removeItem(at: file) }
        continuation?.resume(returning: SyncResponse(status: response.statusCode, headers: Self.fields(of: response), bodyFile: written == 0 ? nil : file))
    }

    private static func fields(of response: HTTPURLResponse) -> [String: String] {
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return headers
    }
}
