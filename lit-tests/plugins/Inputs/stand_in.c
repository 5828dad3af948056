/* Stands in for another version's libMLIR.so (only its soname matters). */
int stand_in;
