"""The Kafka error code a refused append answers with: storage/ names what is
wrong with the records (storage.errors.RecordsFault) without knowing the
protocol, and the partition layer answers clients in Kafka's codes."""
from __future__ import annotations

from core.error_codes import ErrorCode
from storage.errors import InvalidRecordsError, RecordsFault

FAULT_ERROR_CODES: dict[RecordsFault, ErrorCode] = {
    RecordsFault.corrupt_message: ErrorCode.corrupt_message,
    RecordsFault.message_too_large: ErrorCode.message_too_large,
    RecordsFault.record_list_too_large: ErrorCode.record_list_too_large,
    RecordsFault.invalid_timestamp: ErrorCode.invalid_timestamp,
    RecordsFault.unsupported_compression_type: ErrorCode.unsupported_compression_type,
    RecordsFault.invalid_record: ErrorCode.invalid_record,
    RecordsFault.out_of_order_sequence_number: ErrorCode.out_of_order_sequence_number,
    RecordsFault.invalid_producer_epoch: ErrorCode.invalid_producer_epoch,
    RecordsFault.invalid_txn_state: ErrorCode.invalid_txn_state,
    RecordsFault.transaction_coordinator_fenced: ErrorCode.transaction_coordinator_fenced,
}


def append_error_code(exc: InvalidRecordsError) -> ErrorCode:
    """What ProduceResponse / WriteTxnMarkersResponse carry for a refused append."""
    return FAULT_ERROR_CODES[exc.fault]
