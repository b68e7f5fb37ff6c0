import DeltaSnapCore
import Observation

/// A query's result held for a screen: an `@Observable` value a SwiftUI view (or anything
/// that tracks Observation) reads, changed on the main actor whenever
/// ``DeltaSnapReplica/observe(_:)`` yields — so the view redraws when, and only when, its
/// data changed.
///
/// ```swift
/// struct CheapInLisbon: View {
///     @State var cheap = LiveQuery(ReplicaQuery().filter("city", .equal, .string("Lisbon")).limit(20), in: replica)
///     var body: some View { List(cheap.results, id: \.self) { Text(String(describing: $0["name"])) } }
/// }
/// ```
///
/// It listens until it is released.
@MainActor @Observable
public final class LiveQuery {
    /// The records the query selects, as of the last change (empty until the first result).
    public private(set) var results: [JSONValue] = []
    /// Whether the first result has arrived.
    public private(set) var isLoaded = false
    /// Why the query stopped (a field that cannot be queried, a failed read); it then stays.
    public private(set) var failure: (any Error)?

    @ObservationIgnored private let listening: Task<Void, Never>

    public init(_ query: ReplicaQuery, in replica: DeltaSnapReplica) {
        // The task reaches this object through a weak reference, so that releasing it ends
        // the listening (deinit cancels the task, which ends the sequence).
        let sink = Sink()
        listening = Task { @MainActor in
            do {
                for try await results in try await replica.observe(query) {
                    guard let owner = sink.owner else { return }
                    owner.results = results
                    owner.isLoaded = true
                }
            } catch {
                sink.owner?.failure = error
            }
        }
        sink.owner = self
    }

    deinit { listening.cancel() }

    @MainActor private final class Sink {
        weak var owner: LiveQuery?
    }
}
