/* Included (-include) ahead of the old codec's sources from git history and
 * of codec_cases.c's old build: its public names get an old_ prefix, so the
 * old and the msgpack-c codec link into one benchmark. */
#define proto_buf_init old_proto_buf_init
#define proto_buf_free old_proto_buf_free
#define proto_buf_reserve old_proto_buf_reserve
#define proto_buf_append old_proto_buf_append
#define proto_buf_consume old_proto_buf_consume
#define proto_put_map old_proto_put_map
#define proto_put_array old_proto_put_array
#define proto_put_str old_proto_put_str
#define proto_put_strn old_proto_put_strn
#define proto_put_bin old_proto_put_bin
#define proto_put_int old_proto_put_int
#define proto_put_uint old_proto_put_uint
#define proto_put_double old_proto_put_double
#define proto_put_bool old_proto_put_bool
#define proto_put_nil old_proto_put_nil
#define proto_put_val old_proto_put_val
#define proto_error_set old_proto_error_set
#define proto_decode old_proto_decode
#define proto_doc_free old_proto_doc_free
#define proto_map_get old_proto_map_get
#define proto_str_eq old_proto_str_eq
#define proto_strdup old_proto_strdup
