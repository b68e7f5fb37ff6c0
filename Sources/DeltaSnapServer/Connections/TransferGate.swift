import NIOConcurrencyHelpers

/// The descriptors a request may open for itself (a large blob's download), counted: one
/// past ``ConnectionLimits/transferDescriptors`` is refused (`503`, `Retry-After`) instead of
/// taking a descriptor the store and the runtime keep — a connection cap alone cannot bound
/// them, since any connection may download.
///
/// ```swift
/// guard let slot = gate.enter() else { throw APIError.overCapacity() }
/// // …the file is open while `slot` is held; released when it is dropped
/// ```
final class TransferGate: Sendable {
    /// One descriptor taken; given back when the last reference to it goes.
    final class Slot: Sendable {
        private let gate: TransferGate

        fileprivate init(gate: TransferGate) {
            self.gate = gate
        }

        deinit {
            gate.inUse.withLockedValue { $0 -= 1 }
        }
    }

    let capacity: Int
    fileprivate let inUse = NIOLockedValueBox(0)

    init(capacity: Int) {
        self.capacity = capacity
    }

    /// A slot, or nil when every one is taken.
    func enter() -> Slot? {
        let entered = inUse.withLockedValue { inUse -> Bool in
            guard inUse < capacity else { return false }
            inUse += 1
            return true
        }
        return entered ? Slot(gate: self) : nil
    }

    var count: Int { inUse.withLockedValue { $0 } }
}
